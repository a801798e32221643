"""The composition root: the only package that builds concrete sources, sinks and judges.

``worker`` runs the live loop (intake, evaluation, publishing, commits, shutdown),
``offline`` the ``eval`` command over a file, ``labels_job`` the human-label joiner and
``demo`` the self-contained demo; the other modules are their parts.
"""
