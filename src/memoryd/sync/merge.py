"""Field-level merge of one memory held on both sides (seed 000, issue 18).

- list fields (tags, triggers, relations, supersedes, observations, supersede decisions) take
  the union, local order first;
- a scalar changed on one side only takes that side's value; "changed" is measured against
  the base, the field's digest when the two sides last agreed (`SyncBase`), and a field with
  no base counts as changed on both sides;
- a scalar changed on both sides takes the newer `updated_at` under `merge`, the named side
  under `prefer-local` / `prefer-remote`;
- the body changed on both sides under `merge` cannot be resolved: the local memory stays and
  the caller writes the remote one to `_conflicts/`;
- recall counts and times take the larger; `updated_at` the later.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memoryd.models import Frontmatter, Memory
from memoryd.sync.models import ConflictStrategy, FieldChange

SCALARS: dict[str, tuple[str, ...]] = {
    "title": ("title",),
    "type": ("type",),
    "source": ("source",),
    "category": ("category",),
    "ttl_days": ("ttl_days",),
    "decay": ("decay_state", "forgotten_at"),
    "dura_score": ("dura_score",),
    "promoted_from": ("promoted_from",),
}
"""Each merged scalar and the frontmatter fields it covers (decay state and the time decay
forgot a memory move together)."""
LISTS = ("tags", "triggers", "supersedes", "observations", "relations", "supersede_decisions")
BODY = "body"


def _json(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


_PLAIN = (str, int, type(None))
_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)
"""What `json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)` encodes with."""


def digest(value: Any) -> str:
    """A short, stable fingerprint of a field's value (the same in every process)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value):
        text = repr(value)  # the common scalars: plain values, no JSON needed
    else:
        text = _ENCODER.encode(_json(value))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def scalar(meta: Frontmatter, name: str) -> tuple[Any, ...]:
    return tuple(getattr(meta, f) for f in SCALARS[name])


_SCALAR_FIELDS = tuple(SCALARS.items())


def digests(memory: Memory) -> dict[str, str]:
    """The base a side records for a memory once both sides agree on it."""
    fields = memory.meta.__dict__
    out = {name: digest(tuple([fields[f] for f in names])) for name, names in _SCALAR_FIELDS}
    out[BODY] = digest(memory.body)
    return out


@dataclass
class Merged:
    memory: Memory
    changes: list[FieldChange] = field(default_factory=list)
    """Fields whose value differs from the local memory's, and where they came from."""
    body_conflict: bool = False
    base: dict[str, str] = field(default_factory=dict)
    """What to record as the base after this import: the remote's digests."""

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def _union(local: list[Any], remote: list[Any]) -> list[Any]:
    out = list(local)
    for item in remote:
        if item not in out:
            out.append(item)
    return out


def _newer(local: Memory, remote: Memory) -> bool:
    """Whether the remote side was edited later (ties keep local)."""
    lt = local.meta.updated_at or local.meta.created_at
    rt = remote.meta.updated_at or remote.meta.created_at
    return rt > lt


def merge(
    local: Memory,
    remote: Memory,
    base: Mapping[str, str] | None,
    strategy: ConflictStrategy,
    *,
    open_conflict: bool = False,
) -> Merged:
    """The memory this side holds after importing `remote` over `local` (same slug).

    `open_conflict`: the remote side holds this side's body in an open conflict of its own
    (`_conflicts/`), so the bodies differ on both sides whatever the base says."""
    base = base or {}
    values: dict[str, Any] = {}
    out = Merged(memory=local)
    newer = _newer(local, remote)
    both = "local" if strategy == "prefer-local" else "remote"
    if strategy == "merge":
        both = "remote" if newer else "local"

    for name, fields in SCALARS.items():
        lv, rv = scalar(local.meta, name), scalar(remote.meta, name)
        side = _side(lv, rv, base.get(name), both)
        if side == "remote":
            values.update(zip(fields, rv, strict=True))
            out.changes.append(FieldChange(field=name, took="remote"))
    _lists_and_recall(local, remote, values, out.changes)

    body = local.body
    if local.body != remote.body:
        body_side = _side(local.body, remote.body, base.get(BODY), both)
        both_changed = open_conflict or (
            _changed(local.body, base.get(BODY)) and _changed(remote.body, base.get(BODY))
        )
        if open_conflict:
            body_side = both
        if both_changed and strategy == "merge":
            out.body_conflict = True
            out.changes.append(FieldChange(field=BODY, took="conflict"))
        elif body_side == "remote":
            body = remote.body
            out.changes.append(FieldChange(field=BODY, took="remote"))
    # The remote's values are the base from now on: importing the same file again sees
    # only this side's changes, so a field decided (or a conflict raised) once stays so.
    out.base = digests(remote)

    extra_l, extra_r = local.meta.model_extra or {}, remote.meta.model_extra or {}
    values.update({k: v for k, v in extra_r.items() if k not in extra_l})
    data = local.meta.model_dump()
    data.update(values)
    if any(c.took != "conflict" for c in out.changes) and remote.meta.updated_at is not None:
        data["updated_at"] = max(
            local.meta.updated_at or local.meta.created_at, remote.meta.updated_at
        )
    meta = Frontmatter.model_validate(data)
    out.memory = Memory(meta=meta, body=body, path=local.path, sensitive=local.sensitive)
    return out


def _changed(value: Any, base: str | None) -> bool:
    return base is None or digest(value) != base


def _side(local: Any, remote: Any, base: str | None, both: str) -> str:
    """Which side's value a field takes: the side that changed it, `both` when both did."""
    if local == remote:
        return "local"
    l_changed, r_changed = _changed(local, base), _changed(remote, base)
    if l_changed and r_changed:
        return both
    return "remote" if r_changed else "local"


def _lists_and_recall(
    local: Memory, remote: Memory, values: dict[str, Any], changes: list[FieldChange]
) -> None:
    for name in LISTS:
        mine = getattr(local.meta, name)
        united = _union(mine, getattr(remote.meta, name))
        if united != mine:
            values[name] = united
            changes.append(FieldChange(field=name, took="union"))
    if remote.meta.recall_count > local.meta.recall_count:
        values["recall_count"] = remote.meta.recall_count
        changes.append(FieldChange(field="recall_count", took="max"))
    l_at, r_at = local.meta.last_recalled_at, remote.meta.last_recalled_at
    if r_at is not None and (l_at is None or r_at > l_at):
        values["last_recalled_at"] = r_at
        changes.append(FieldChange(field="last_recalled_at", took="max"))


def differing_fields(local: Memory, remote: Memory) -> list[str]:
    """The frontmatter fields (and `body`) whose values differ: what diff-with-remote shows."""
    lf, rf = local.meta.to_yaml_dict(), remote.meta.to_yaml_dict()
    names = [k for k in dict.fromkeys([*lf, *rf]) if lf.get(k) != rf.get(k)]
    if local.body != remote.body:
        names.append(BODY)
    return names
