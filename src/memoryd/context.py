"""The memories an agent hook injects: which ones, in what order (`memoryd inject`).

A prompt's context is its recall without superseded memories, session notes last; a session
start's is the scope's long-term memories, warnings and decisions first. The daemon's
`/v1/recall/context` route, its recall readers and the hook's in-process fallback all call
`choose`, over any `MemoryAPI`. Standard library only at import: the hook imports `Item`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memoryd.models import RecallResult
    from memoryd.protocol import MemoryAPI

SESSION_START_LIMIT = 40
_LONG_TERM_STATES = ["alive", "dim"]


class Item:
    """One memory as the hook renders it: equal by its fields, which `vars` gives, and
    pickled whole (the daemon's recall readers send it back through a pipe). Not a
    dataclass: the hook would import `dataclasses` and `inspect` for it on every prompt."""

    def __init__(self, slug: str, type: str, title: str, body: str, created_at: str) -> None:
        self.slug = slug
        self.type = type
        self.title = title
        self.body = body
        self.created_at = created_at

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # mutable and equal by value, as before

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"Item({fields})"


_ROWS = (
    "RETURN m.slug, m.type, m.title, m.body, m.created_at, m.decay_state, m.scope_hash,"
    " EXISTS { MATCH (:Memory)-[s:SUPERSEDES]->(m) WHERE s.status = 'active' } AS superseded"
)

_NOT_SENSITIVE = (
    "AND coalesce(m.sensitive, false) = false AND NOT EXISTS"
    " { MATCH (s:Scope) WHERE s.hash = m.scope_hash AND s.sensitive = true }"
)
"""Inject never shows a sensitive memory (its own flag, or its scope's)."""


def _items(rows: list[list[Any]]) -> dict[str, tuple[Item, bool, str]]:
    found = {}
    for slug, type_, title, body, created, state, _scope, superseded in rows:
        item = Item(str(slug), str(type_), str(title), str(body or ""), str(created or ""))
        found[item.slug] = (item, bool(superseded), str(state))
    return found


def _read(svc: MemoryAPI, query: str, params: dict[str, Any], limit: int) -> list[list[Any]]:
    """Rows of one of inject's own queries: in process straight from the graph (a hook
    cannot wait for the user-Cypher sandbox to start), through a daemon by its Cypher route."""
    graph = getattr(svc, "graph", None)
    if graph is None:
        return svc.cypher(query, params, limit=limit).rows
    rows: list[list[Any]] = graph.cypher(query, params, limit=limit).rows
    return rows


def choose(
    svc: MemoryAPI,
    prompt: str | None,
    scope_hash: str | None,
    k: int,
    *,
    track: bool = True,
) -> tuple[list[Item], RecallResult | None]:
    """The memories to inject, best first, and the recall that found them (None at session
    start, which lists the scope's long-term memories instead of recalling).

    With `track=False` the caller counts the recall itself (the daemon queues it on its
    writer instead of writing from a reader thread).
    """
    if prompt and not prompt.strip():
        return [], None  # a blank prompt asks for nothing (and recall refuses it)
    if prompt:
        from memoryd.recall.config import INJECT_MIN_SCORE

        result = svc.recall(prompt, scope=scope_hash, k=k, track=track)
        # A sensitive memory is never injected, grant or not: an agent's context goes to
        # an LLM (the recall already left ungranted ones out).
        result.hits = [hit for hit in result.hits if not hit.sensitive]
        slugs = [hit.slug for hit in result.hits if hit.score >= INJECT_MIN_SCORE]
        if not slugs:
            return [], result
        rows = _read(
            svc,
            f"MATCH (m:Memory) WHERE m.slug IN $slugs {_NOT_SENSITIVE} {_ROWS}",
            {"slugs": slugs},
            len(slugs),
        )
        found = _items(rows)
        ranked = []
        for rank, hit in enumerate(result.hits):
            if hit.slug not in found or hit.superseded_by or hit.score < INJECT_MIN_SCORE:
                continue
            item, superseded, _ = found[hit.slug]
            if superseded:
                continue
            ranked.append((hit.type.value == "session", rank, item))
        ranked.sort(key=lambda r: (r[0], r[1]))
        return [item for _, _, item in ranked], result
    if scope_hash is None:
        return [], None
    rows = _read(
        svc,
        f"MATCH (m:Memory) WHERE m.scope_hash = $scope AND m.type <> 'session' {_NOT_SENSITIVE}"
        f" AND m.decay_state IN $states {_ROWS}"
        " ORDER BY m.recall_count DESC, m.created_at DESC LIMIT $take",
        {"scope": scope_hash, "states": _LONG_TERM_STATES, "take": SESSION_START_LIMIT * 2},
        SESSION_START_LIMIT * 2,
    )
    order = ["warning", "decision", "preference", "playbook", "fact"]
    items = [item for item, superseded, _ in _items(rows).values() if not superseded]
    items.sort(key=lambda i: order.index(i.type) if i.type in order else len(order))
    return items[:SESSION_START_LIMIT], None
