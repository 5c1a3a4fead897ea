"""The MCP tools' parameter types: the official memory server's items, field for field, and
the descriptions clients show for the parameters memoryd's own tools share.

Items are pydantic models, so the SDK puts their fields in each tool's input schema and
checks a call against them before the tool runs: `[{"nome": "typo"}]` is an error naming
`entities[0].name`, not an empty answer. `argument_errors` words that error as one line.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, ValidationError

from memoryd.errors import describe_validation


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value.strip()


Name = Annotated[str, AfterValidator(_not_blank)]
"""A name that means something: surrounding spaces dropped, blank refused (the official
server would store an entity called "")."""


class EntityItem(BaseModel):
    """An entity of `create_entities`, as the official memory server declares it."""

    name: Name = Field(description="The entity's name, unique in the graph (case-sensitive)")
    entityType: str = Field(description="Its type, e.g. person, library, project, concept")
    observations: list[str] = Field(
        description="Facts about the entity, one short sentence each (may be empty)"
    )


class RelationItem(BaseModel):
    """A relation of `create_relations` and `delete_relations`, as the official server's."""

    from_: Name = Field(alias="from", description="The name of the entity the relation starts at")
    to: Name = Field(description="The name of the entity the relation ends at")
    relationType: Name = Field(
        description="What the relation says, in active voice, e.g. uses, works_on"
    )


class ObservationItem(BaseModel):
    """An `add_observations` item, as the official server's."""

    entityName: str = Field(description="The name of an existing entity")
    contents: list[str] = Field(description="The observations to add to it")


class DeletionItem(BaseModel):
    """A `delete_observations` item, as the official server's."""

    entityName: str = Field(description="The name of the entity holding the observations")
    observations: list[str] = Field(description="The observations to delete, exact text")


Scope = Annotated[
    str | None,
    Field(description="A project path or 12-hex scope hash to stay inside; omit for all projects"),
]
Slug = Annotated[str, Field(description="A memory's slug, as recall and entity_context give it")]
PromotionId = Annotated[int, Field(description="The promotion's id, from list_promotions")]
Limit = Annotated[int, Field(description="At most this many rows")]


def _where(loc: tuple[int | str, ...]) -> str:
    """`("entities", 1, "name")` as `entities[1].name`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".") or "arguments"


def _got(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


_EXPECTED = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
}


def argument_errors(exc: ValidationError) -> str:
    """A tool call's arguments that fail its input schema, as one line in the CLI's words:
    `entities[1].name: required (the item has nome, entityType)`. The first missing field of an
    item names the keys it does have, so a misspelt one is easy to spot."""
    errors, told = [], set()
    for err in exc.errors():
        kind, value, item = err["type"], err.get("input"), err["loc"][:-1]
        if kind == "missing":
            has = ", ".join(map(str, value)) if isinstance(value, dict) and value else "no keys"
            message = "required" if not item or item in told else f"required (the item has {has})"
            told.add(item)
        elif kind in _EXPECTED:
            message = f"{_EXPECTED[kind]} (got {_got(value)})"
        else:
            errors.append({**err, "loc": (_where(err["loc"]),)})
            continue
        errors.append({"type": "", "loc": (_where(err["loc"]),), "msg": message})
    return describe_validation(errors)
