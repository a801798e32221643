"""Validation messages that say what to do: pydantic's text plus a hint where it helps.

Two mistakes a new user makes that pydantic's words do not explain: an unquoted YAML word
that YAML 1.1 (PyYAML) reads as a boolean (a route named ``off``, classifier labels
``yes``/``no``), and a misspelt key (``bootstrap_server``), for which the hint names the
setting of that section it is closest to.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

__all__ = ["error_message"]

_YAML_BOOLEAN_HINT = (" (YAML reads an unquoted yes, no, on, off, true or false as a "
                      "boolean: quote it, e.g. \"no\")")


def error_message(err: Mapping[str, Any], model: type[BaseModel] | None = None, *,
                  list_known: bool = False) -> str:
    """pydantic's message for one validation error, with a hint where one helps.

    Args:
        err: One entry of ``ValidationError.errors()``.
        model: The model that was validated; with it, an unknown key is compared with the
            settings of its section ("did you mean ...").
        list_known: When an unknown key is like none of them, list them ("known: ...").
            For short, undocumented-in-the-file sets such as an evaluator's params, where
            a guess (``allowed_topics`` for ``criteria``) otherwise leaves the user stuck.
    """
    message = str(err["msg"])
    if err["type"] == "string_type" and isinstance(err.get("input"), bool):
        message += _YAML_BOOLEAN_HINT
    elif err["type"] == "extra_forbidden" and model is not None and err["loc"]:
        loc = err["loc"]
        names = _field_names_at(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.75)
        if close:
            message += f" (did you mean {close[0]}?)"
        elif list_known and names:
            message += f" (known: {', '.join(names)})"
    return message


def _members(annotation: Any) -> list[Any]:
    """``annotation`` without ``Annotated`` and ``Optional``/unions: the types it allows."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field_names_at(model: type[BaseModel], path: Sequence[int | str]) -> list[str]:
    """The field names of the model(s) at ``path`` below ``model`` ([] when it leads
    elsewhere): through fields, list indexes, dict keys and union tags (``judges.NAME.
    openai``, the tag pydantic puts in the path of a judge's error)."""
    current: list[Any] = [model]
    for part in path:
        step: list[Any] = []
        for annotation in (m for a in current for m in _members(a)):
            if _is_model(annotation):
                field = annotation.model_fields.get(str(part))
                if field is not None:
                    step.append(field.annotation)
                elif getattr(annotation.model_fields.get("type"), "default", None) == part:
                    step.append(annotation)  # the tag of a discriminated union's member
            elif get_origin(annotation) in (list, dict):
                step.append(get_args(annotation)[-1])
        current = step
    return sorted({name for a in current for m in _members(a) if _is_model(m)
                   for name in m.model_fields})
