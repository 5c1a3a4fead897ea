"""Redaction of a whole memory: every field a text can reach, slugs included.

The one write path for redaction: every way a memory's text enters (record, capture, MCP,
HTTP, `import mcp-memory`, `sync import`, promotion, merge, the LLM's summary and supersede
reasons, extracted entities) passes its memory through `clean_memory` (or its draft's text
through `redact`) before anything is written. `redact` is idempotent, so a memory cleaned
twice is the memory cleaned once, and an export of a cleaned memory imports unchanged.

A slug is a file name and an identity: one that holds a secret has the secret replaced by
`redacted-<kind>` (`clean_slug`), a function of the slug alone, so every reference to it
(supersedes, promoted_from, relation ends) is renamed the same way. Not imported by
`memoryd.redact` itself: the capture hook never loads pydantic's models.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from memoryd.models import (
    SLUG_RE,
    Frontmatter,
    Memory,
    PromotionProposal,
    RelationRef,
    SupersedeDecision,
)
from memoryd.redact import clean_slug as _clean_slug
from memoryd.redact import redact, redact_json

_BATCH: ContextVar[dict[str, str] | None] = ContextVar("memoryd_redact_batch", default=None)
_SLUGS: ContextVar[dict[str, str] | None] = ContextVar("memoryd_redact_slugs", default=None)


@contextmanager
def one_batch() -> Iterator[None]:
    """While a batch of memories is prepared, a text met twice is redacted once: the tags,
    source and entity ids an import repeats on every memory, and a title `_prepare` redacted
    before `clean_meta` sees it again; a slug likewise (`clean_slug`: the one `_prepare`
    cleaned is cleaned again with the entities extraction adds). `redact` and `clean_slug`
    are functions of their text, so the result is the same; the texts are dropped when the
    batch is prepared (no plaintext outlives it)."""
    memo: dict[str, str] = {}
    slugs: dict[str, str] = {}
    token, slug_token = _BATCH.set(memo), _SLUGS.set(slugs)
    try:
        yield
    finally:
        _SLUGS.reset(slug_token)
        _BATCH.reset(token)
        memo.clear()
        slugs.clear()


def redact_field(text: str) -> str:
    """`redact`, once per text inside `one_batch`."""
    memo = _BATCH.get()
    if memo is None:
        return redact(text)
    out = memo.get(text)
    if out is None:
        out = memo[text] = redact(text)
    return out


def clean_slug(slug: str) -> str:
    """`redact.clean_slug`, and a slug memoryd accepts (else `redacted`); once per slug
    inside `one_batch`."""
    memo = _SLUGS.get()
    out = None if memo is None else memo.get(slug)
    if out is None:
        out = _clean_slug(slug)
        out = out if out == slug or SLUG_RE.match(out) else "redacted"
        if memo is not None:
            memo[slug] = out
    return out


def _ref(value: str | None) -> str | None:
    """A relation end or an entity id: a slug reference keeps its `memory:` form."""
    if value is None:
        return None
    if value.startswith("memory:"):
        return "memory:" + clean_slug(value.removeprefix("memory:"))
    return redact_field(value)


def _texts(values: list[str]) -> list[str]:
    return [redact_field(v) for v in values]


def _decision(d: SupersedeDecision) -> SupersedeDecision:
    update = {
        "older": clean_slug(d.older),
        "judge": None if d.judge is None else redact_field(d.judge),
        "entity_id": _ref(d.entity_id),
        "reason": None if d.reason is None else redact_field(d.reason),
    }
    if all(getattr(d, k) == v for k, v in update.items()):
        return d
    return d.model_copy(update=update)


def _relation(r: RelationRef) -> RelationRef:
    update = {
        "subject": _ref(r.subject),
        "object": _ref(r.object) or r.object,
        "label": None if r.label is None else redact_field(r.label),
    }
    if all(getattr(r, k) == v for k, v in update.items()):
        return r
    return r.model_copy(update=update)


def clean_meta(meta: Frontmatter) -> Frontmatter:
    """The frontmatter with every text field redacted and every slug cleaned: `meta` itself
    when nothing changed, else a copy (the caller's object stays as it was)."""
    update: dict[str, Any] = {
        "title": redact_field(meta.title).strip()[:500] or "[REDACTED]",
        "slug": clean_slug(meta.slug),
        "source": redact_field(meta.source).strip() or "unknown",
        "tags": _texts(meta.tags),
        "triggers": _texts(meta.triggers),
        "category": None if meta.category is None else redact_field(meta.category),
        "promoted_from": None if meta.promoted_from is None else clean_slug(meta.promoted_from),
        "supersedes": [clean_slug(s) for s in meta.supersedes],
        "supersede_decisions": [_decision(d) for d in meta.supersede_decisions],
        "observations": list(dict.fromkeys(_ref(o) or o for o in meta.observations)),
        "relations": [_relation(r) for r in meta.relations],
    }
    extra = meta.__pydantic_extra__ or {}
    cleaned_extra = {k: redact_json(v, key=k) for k, v in extra.items()}
    changed = {k: v for k, v in update.items() if getattr(meta, k) != v}
    if not changed and cleaned_extra == extra:
        return meta
    data = {**meta.model_dump(), **changed, **cleaned_extra}
    return Frontmatter.model_validate(data)


def clean_facts(meta: Frontmatter) -> Frontmatter:
    """`clean_meta` of a frontmatter `clean_meta` made, to which extraction then added
    observations and relations: only those two are read (the rest is clean already, and
    `clean_meta` is idempotent); when one of them holds a secret, the whole `clean_meta`."""
    observations = list(dict.fromkeys(_ref(o) or o for o in meta.observations))
    if observations == meta.observations and all(_relation(r) is r for r in meta.relations):
        return meta
    return clean_meta(meta)


def clean_memory(memory: Memory) -> Memory:
    """`memory` with its body and frontmatter redacted (`clean_meta`): the same object when
    nothing changed, else a new one with the same path and sensitivity."""
    body = redact(memory.body)
    meta = clean_meta(memory.meta)
    if body == memory.body and meta is memory.meta:
        return memory
    return Memory(meta=meta, body=body, path=memory.path, sensitive=memory.sensitive)


def clean_stored(memory: Memory) -> None:
    """Clean, in place, a memory about to be written over its stored file: its slug is its
    file's name and stays (a memory stored before its slug could be cleaned keeps it)."""
    cleaned = clean_memory(memory)
    if cleaned is memory:
        return
    if cleaned.meta.slug != memory.meta.slug:
        cleaned.meta.slug = memory.meta.slug
    memory.meta, memory.body = cleaned.meta, cleaned.body


def clean_proposal(proposal: PromotionProposal) -> PromotionProposal:
    """A promotion proposal (the LLM's title, body, triggers and reasoning, kept in the
    review queue) redacted; `proposal` itself when nothing changed."""
    update = {
        "source_title": redact(proposal.source_title),
        "proposed_title": redact(proposal.proposed_title).strip()[:200] or "[REDACTED]",
        "proposed_body": redact(proposal.proposed_body),
        "proposed_triggers": _texts(proposal.proposed_triggers),
        "proposed_supersedes": [clean_slug(s) for s in proposal.proposed_supersedes],
        "reasoning": redact(proposal.reasoning),
    }
    changed = {k: v for k, v in update.items() if getattr(proposal, k) != v}
    return proposal.model_copy(update=changed) if changed else proposal
