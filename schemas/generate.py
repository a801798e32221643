"""Regenerate the committed JSON Schemas: ``python schemas/generate.py``.

``tests/unit/test_schema.py`` fails when a committed file differs from what the models
produce, so a change to ``EvalResult`` always comes with its schema.
"""

from __future__ import annotations

import json
from pathlib import Path

from evalstream.events import eval_result_json_schema

HERE = Path(__file__).resolve().parent
SCHEMAS = {"eval_result.schema.json": eval_result_json_schema}


def render(name: str) -> str:
    """The text the schema file ``name`` should have."""
    return json.dumps(SCHEMAS[name](), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    for filename in SCHEMAS:
        (HERE / filename).write_text(render(filename), encoding="utf-8")
        print(f"wrote {HERE / filename}")
