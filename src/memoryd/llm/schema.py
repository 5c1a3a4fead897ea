"""JSON schemas in the subset every provider accepts, and instructions for those that
cannot be shown one (`portable_schema`, `schema_is_closed`, `schema_instructions`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

_IDENTIFIER_BAD = re.compile(r"[^A-Za-z0-9_-]")
_MOVED_TO_DESCRIPTION = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
)


def schema_identifier(name: str) -> str:
    """A name every API accepts for a schema or tool (`^[A-Za-z0-9_-]{1,64}$`)."""
    return (_IDENTIFIER_BAD.sub("_", name) or "answer")[:64]


def portable_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of `model` in the subset all three providers accept.

    `$ref`s are inlined (Ollama's grammar and some OpenAI-compatible servers do not
    follow them), every object is closed with all properties required (what OpenAI's
    strict mode demands; pydantic still applies the defaults on our side), and
    `title`/`default` and range/length constraints are dropped, the constraints
    restated in the description so the model still sees them. The reply is always
    validated against the pydantic model itself.
    """
    raw = model.model_json_schema()
    defs: dict[str, Any] = raw.pop("$defs", {})
    result = _portable(raw, defs, depth=0)
    if not isinstance(result, dict):  # pragma: no cover - a BaseModel schema is a mapping
        raise TypeError(f"schema of {model.__name__} is not an object")
    return result


def _portable(node: Any, defs: Mapping[str, Any], depth: int) -> Any:
    if depth > 32:
        raise ValueError("schema nests too deeply (recursive models are not supported)")
    if isinstance(node, list):
        return [_portable(item, defs, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[str(node["$ref"]).rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _portable(merged, defs, depth + 1)
    out: dict[str, Any] = {}
    constraints = [f"{key} {node[key]}" for key in _MOVED_TO_DESCRIPTION if key in node]
    for key, value in node.items():
        if key in ("title", "default") or key in _MOVED_TO_DESCRIPTION:
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _portable(sub, defs, depth + 1) for name, sub in value.items()}
        else:
            out[key] = _portable(value, defs, depth + 1)
    if constraints:
        note = "(" + ", ".join(constraints) + ")"
        out["description"] = f"{out['description']} {note}" if "description" in out else note
    if out.get("type") == "object" and "properties" in out:
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def schema_is_closed(schema: Any) -> bool:
    """True when every object in `schema` is closed, as OpenAI's strict mode requires.

    A free-form mapping field (`dict[str, X]`) cannot be closed, so such a schema is
    sent without `strict`.
    """
    if isinstance(schema, list):
        return all(schema_is_closed(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
        return False
    return all(schema_is_closed(value) for value in schema.values())


def schema_instructions(json_schema: Mapping[str, Any]) -> str:
    """The schema spelled out for the model, where the API cannot show it the schema."""
    return (
        "Reply with exactly one JSON object, and nothing else, that conforms to this "
        f"JSON Schema:\n{json.dumps(json_schema, ensure_ascii=False)}"
    )
