"""Judges: what evaluators ask (``base.Judge``), created by name (``registry``).

``builtin`` answers offline from lexicons and small models, ``openai_compat`` over an
OpenAI-compatible HTTP API (with ``resilience``, ``spend``, ``cache`` around it), and
``cascade`` asks a cheap judge first and escalates when it is unsure.
"""
