"""Typed LLM calls: the extraction stage, session summaries, and the judgements governance
asks for.

Each function renders its packaged prompt, asks the provider for one schema, and
returns plain values; nothing here writes. `extract_with_llm` turns the model's answer
into `memoryd.models.Extraction` proposals (stage `llm`), keeping only what links up:
a relation whose ends are not among the extracted entities, or whose predicate is not
one of the eleven, is dropped with a note rather than failing the whole answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from memoryd.llm.base import LLMProvider
from memoryd.llm.prompts import render_prompt
from memoryd.models import (
    Dura,
    EntityType,
    Extraction,
    MemoryType,
    Predicate,
    ProposedEntity,
    ProposedRelation,
)

logger = logging.getLogger(__name__)

STAGE = "llm"
MEMORY_SUBJECT = "memory"
"""The subject/object that stands for the memory the text came from."""

MAX_TEXT_CHARS = 48_000
"""Longer texts are clipped (head and tail kept) before they are sent: cost and context."""
MAX_KNOWN_ENTITIES = 200
MAX_EVIDENCE_CHARS = 300
MAX_SPANS = 20


def _unit(value: float) -> float:
    """Clamp to [0, 1]: a confidence of 1.2 is not worth a second paid request."""
    return min(1.0, max(0.0, value))


Unit = Annotated[float, AfterValidator(_unit)]


# --------------------------------------------------------------------------- extraction


class LLMEntity(BaseModel):
    """One entity the memory names."""

    name: str = Field(description="the name as the text or the known entities spell it")
    type: str = Field(
        description="the entity type",
        json_schema_extra={"enum": [t.value for t in EntityType]},
    )
    """A plain string on purpose: one odd type drops one entity, not the whole answer."""
    aliases: list[str] = Field(default_factory=list, description="other spellings in the text")
    confidence: Unit = Field(default=0.8, description="0 to 1")


class LLMRelation(BaseModel):
    """One relation the memory states: subject → predicate → object."""

    subject: str = Field(description="an entity name from `entities`, or `memory`")
    predicate: str = Field(
        description="the relation",
        json_schema_extra={"enum": [p.value for p in Predicate]},
    )
    object: str = Field(description="an entity name from `entities`, or `memory`")
    confidence: Unit = Field(default=0.5, description="0 to 1")
    evidence: str = Field(default="", description="shortest exact quote supporting it")


class LLMExtraction(BaseModel):
    """The entities and relations of one memory."""

    entities: list[LLMEntity] = Field(default_factory=list)
    relations: list[LLMRelation] = Field(default_factory=list)


_TYPE_SYNONYMS: dict[str, EntityType] = {
    "framework": EntityType.LIBRARY,
    "package": EntityType.LIBRARY,
    "sdk": EntityType.LIBRARY,
    "module": EntityType.LIBRARY,
    "crate": EntityType.LIBRARY,
    "service": EntityType.TOOL,
    "database": EntityType.TOOL,
    "platform": EntityType.TOOL,
    "cli": EntityType.TOOL,
    "software": EntityType.TOOL,
    "company": EntityType.ORGANIZATION,
    "team": EntityType.ORGANIZATION,
    "org": EntityType.ORGANIZATION,
    "location": EntityType.PLACE,
    "city": EntityType.PLACE,
    "country": EntityType.PLACE,
    "region": EntityType.PLACE,
    "repository": EntityType.PROJECT,
    "repo": EntityType.PROJECT,
    "product": EntityType.PROJECT,
    "language": EntityType.CONCEPT,
    "programming_language": EntityType.CONCEPT,
    "protocol": EntityType.CONCEPT,
    "technique": EntityType.CONCEPT,
    "pattern": EntityType.CONCEPT,
}


def extract_with_llm(
    provider: LLMProvider,
    text: str,
    *,
    known_entities: Sequence[str] = (),
    spacy_hint: Extraction | None = None,
) -> Extraction:
    """Ask the LLM for the entities and relations of `text`, as stage-`llm` proposals.

    `known_entities` (names already in the graph) steer spelling; `spacy_hint`, the
    offline stage's proposals, is shown so the model refines rather than restarts.
    Raises what `complete_json` raises (ExtractionFailed, RateLimited, ConfigError).
    """
    if not text.strip():
        return Extraction(stages=[STAGE], notes=["llm: empty text, nothing sent"])
    clipped, left_out = clip_text(text, MAX_TEXT_CHARS)
    prompt = render_prompt(
        "extract_entities",
        text=clipped,
        known_entities=_known_block(known_entities),
        hints=_hint_block(spacy_hint),
    )
    reply = provider.complete_json(
        system=prompt.system, prompt=prompt.user, schema=LLMExtraction, max_tokens=4096
    )
    extraction = convert_extraction(reply, text)
    if left_out:
        extraction.notes.append(
            f"llm: the text was clipped to {MAX_TEXT_CHARS} characters ({left_out} left out)"
        )
    logger.debug(
        "llm extraction: %d entities, %d relations, %d notes",
        len(extraction.entities),
        len(extraction.relations),
        len(extraction.notes),
    )
    return extraction


def convert_extraction(reply: LLMExtraction, text: str) -> Extraction:
    """Turn the model's names into ids and keep only relations that link up."""
    notes: list[str] = []
    entities: dict[str, ProposedEntity] = {}
    lookup: dict[str, str] = {}
    for item in reply.entities:
        entity = _entity(item, text, notes)
        if entity is None:
            continue
        existing = entities.get(entity.id)
        if existing is not None:
            entity = existing.model_copy(
                update={
                    "aliases": _unique([*existing.aliases, *entity.aliases]),
                    "confidence": max(existing.confidence, entity.confidence),
                }
            )
        entities[entity.id] = entity
        for spelling in (entity.name, *entity.aliases):
            lookup.setdefault(spelling.casefold(), entity.id)

    relations: dict[tuple[str, Predicate, str], ProposedRelation] = {}
    for rel in reply.relations:
        relation = _relation(rel, lookup, entities, notes)
        if relation is None:
            continue
        key = (relation.subject, relation.predicate, relation.object)
        if key not in relations or relations[key].confidence < relation.confidence:
            relations[key] = relation
    return Extraction(
        entities=list(entities.values()),
        relations=list(relations.values()),
        stages=[STAGE],
        notes=notes,
    )


def _entity(item: LLMEntity, text: str, notes: list[str]) -> ProposedEntity | None:
    name = " ".join(item.name.split())
    if not name:
        notes.append("llm: dropped an entity with an empty name")
        return None
    if name.casefold() == MEMORY_SUBJECT:
        notes.append("llm: dropped entity 'memory' (the word stands for the memory itself)")
        return None
    entity_type = entity_type_of(item.type)
    if entity_type is None:
        notes.append(f"llm: dropped entity {name!r}: unknown type {item.type!r}")
        return None
    aliases = _unique(
        alias for alias in (" ".join(a.split()) for a in item.aliases) if alias and alias != name
    )
    return ProposedEntity(
        name=name,
        type=entity_type,
        confidence=item.confidence,
        aliases=aliases,
        stage=STAGE,
        spans=find_spans(text, [name, *aliases]),
    )


def _relation(
    rel: LLMRelation,
    lookup: dict[str, str],
    entities: dict[str, ProposedEntity],
    notes: list[str],
) -> ProposedRelation | None:
    label = f"{rel.subject} {rel.predicate} {rel.object}"
    predicate = predicate_of(rel.predicate)
    if predicate is None:
        notes.append(f"llm: dropped relation {label!r}: unknown predicate {rel.predicate!r}")
        return None
    subject = _endpoint(rel.subject, lookup, entities)
    obj = _endpoint(rel.object, lookup, entities)
    if subject is None or obj is None:
        missing = rel.subject if subject is None else rel.object
        notes.append(
            f"llm: dropped relation {label!r}: {missing!r} is not among the extracted entities"
        )
        return None
    if subject == obj:
        notes.append(f"llm: dropped relation {label!r}: it links a node to itself")
        return None
    return ProposedRelation(
        subject=subject,
        predicate=predicate,
        object=obj,
        confidence=rel.confidence,
        evidence=rel.evidence.strip()[:MAX_EVIDENCE_CHARS],
        stage=STAGE,
    )


def _endpoint(name: str, lookup: dict[str, str], entities: dict[str, ProposedEntity]) -> str | None:
    cleaned = " ".join(name.split())
    if cleaned.casefold() == MEMORY_SUBJECT:
        return MEMORY_SUBJECT
    if cleaned in entities:  # the model answered with an id
        return cleaned
    return lookup.get(cleaned.casefold())


def entity_type_of(value: str) -> EntityType | None:
    """The EntityType a model's type string means, allowing common synonyms."""
    key = value.strip().lower().replace(" ", "_").replace("-", "_")
    try:
        return EntityType(key)
    except ValueError:
        return _TYPE_SYNONYMS.get(key)


def predicate_of(value: str) -> Predicate | None:
    """The Predicate a model's string means (`works on`, `Works-On` …), or None."""
    key = value.strip().lower().replace(" ", "_").replace("-", "_")
    try:
        return Predicate(key)
    except ValueError:
        return None


def find_spans(text: str, names: Iterable[str]) -> list[tuple[int, int]]:
    """Where the names occur in `text`, as whole words for Latin names (PG ≠ UPGRADE)."""
    spans: set[tuple[int, int]] = set()
    for name in names:
        if not name:
            continue
        pattern = re.escape(name)
        if re.match(r"[A-Za-z0-9_]", name):
            pattern = r"(?<![A-Za-z0-9_])" + pattern
        if re.search(r"[A-Za-z0-9_]$", name):
            pattern += r"(?![A-Za-z0-9_])"
        for match in re.finditer(pattern, text):
            spans.add(match.span())
            if len(spans) >= MAX_SPANS:
                return sorted(spans)
    return sorted(spans)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _known_block(names: Sequence[str]) -> str:
    unique = _unique(n.strip() for n in names if n.strip())
    if not unique:
        return "(none)"
    shown = unique[:MAX_KNOWN_ENTITIES]
    more = len(unique) - len(shown)
    return "\n".join(f"- {n}" for n in shown) + (f"\n(and {more} more)" if more else "")


def _display(node: str) -> str:
    """`entity:library:React` → `React`; `memory` stays."""
    if node.startswith("entity:"):
        return node.split(":", 2)[-1]
    return node


def _hint_block(hint: Extraction | None) -> str:
    if hint is None or (not hint.entities and not hint.relations):
        return "(none)"
    lines = ["entities:"] if hint.entities else []
    lines += [
        f"- {e.name} ({e.type.value}, confidence {e.confidence:.2f}, from {e.stage})"
        for e in hint.entities
    ]
    if hint.relations:
        lines.append("relations:")
        lines += [
            f"- {_display(r.subject)} {r.predicate.value} {_display(r.object)} "
            f"(confidence {r.confidence:.2f})"
            for r in hint.relations
        ]
    return "\n".join(lines)


def clip_text(text: str, limit: int) -> tuple[str, int]:
    """`text` cut to about `limit` characters, keeping the head and the tail.

    Returns the text and how many characters were left out (0 when none). Sessions
    state their context first and their conclusions last; the middle goes.
    """
    if len(text) <= limit:
        return text, 0
    head = limit * 2 // 3
    tail = limit - head
    left_out = len(text) - head - tail
    return f"{text[:head]}\n[… {left_out} characters left out …]\n{text[-tail:]}", left_out


# --------------------------------------------------------------------------- summaries

SUMMARY_TEXT_CHARS = 24_000
"""A session sent for its summary is clipped to this (head and tail kept): the digest capture
wrote is at most a few KB, so only a hand-grown memory is ever cut."""
MAX_SUMMARY_CHARS = 800
MAX_SUMMARY_ITEMS = 6
MAX_SUMMARY_ITEM_CHARS = 300


def _bounded(limit: int) -> AfterValidator:
    """Cut a text to `limit` characters (on a word when it can): an over-long answer is still
    worth keeping, and the summary section must stay small."""

    def cut(value: str) -> str:
        value = " ".join(value.split())
        if len(value) <= limit:
            return value
        head = value[: limit - 1]
        space = head.rfind(" ")
        return (head[:space] if space > limit // 2 else head).rstrip(" ,;:") + "…"

    return AfterValidator(cut)


def _not_blank(value: str) -> str:
    if not value:
        raise ValueError("the summary is empty")
    return value


def _few(items: list[str]) -> list[str]:
    return [item for item in items if item][:MAX_SUMMARY_ITEMS]


SummaryItem = Annotated[str, _bounded(MAX_SUMMARY_ITEM_CHARS)]


class SessionSummary(BaseModel):
    """The LLM summary of one session memory: what happened, what was decided, what is open."""

    summary: Annotated[str, _bounded(MAX_SUMMARY_CHARS), AfterValidator(_not_blank)] = Field(
        description="two to five sentences"
    )
    decisions: Annotated[list[SummaryItem], AfterValidator(_few)] = Field(
        default_factory=list, description="decisions made, one sentence each"
    )
    open_problems: Annotated[list[SummaryItem], AfterValidator(_few)] = Field(
        default_factory=list, description="what was left unresolved, one sentence each"
    )


def summarize_session(provider: LLMProvider, title: str, session_text: str) -> SessionSummary:
    """Summarise one session memory (title and body) for the top of its file.

    Raises what `complete_json` raises (ExtractionFailed, RateLimited, ConfigError).
    """
    prompt = render_prompt(
        "summarize_session",
        title=title.strip(),
        session=clip_text(session_text, SUMMARY_TEXT_CHARS)[0],
    )
    return provider.complete_json(
        system=prompt.system, prompt=prompt.user, schema=SessionSummary, max_tokens=1024
    )


# --------------------------------------------------------------------------- judgements


class SupersedeJudgement(BaseModel):
    """Whether a newer memory supersedes an older one about one entity.

    `confidence` is the probability that it does; governance acts on it
    (≥ 0.85 automatically, 0.5–0.85 via the digest, below 0.5 not at all).
    """

    supersedes: bool
    confidence: Unit = Field(description="probability that the newer supersedes the older")
    reason: str = Field(default="", description="one or two sentences")


def judge_supersedes(
    provider: LLMProvider, newer: str, older: str, entity: str
) -> SupersedeJudgement:
    """Ask whether memory text `newer` supersedes `older` with respect to `entity`."""
    prompt = render_prompt(
        "judge_supersedes",
        entity=entity.strip(),
        newer=clip_text(newer, 12_000)[0],
        older=clip_text(older, 12_000)[0],
    )
    return provider.complete_json(
        system=prompt.system, prompt=prompt.user, schema=SupersedeJudgement, max_tokens=512
    )


LongTermType = Literal["decision", "preference", "fact", "playbook", "warning"]


class DuraJudgement(BaseModel):
    """DURA scores of one session and the long-term memory it would become."""

    D: Unit = Field(description="decision-worthy, 0 to 1")
    U: Unit = Field(description="useful in future, 0 to 1")
    R: Unit = Field(description="recallable hooks, 0 to 1")
    A: Unit = Field(description="accurate, 0 to 1")
    reasoning: str = ""
    proposed_type: LongTermType
    proposed_title: str = Field(min_length=1, max_length=200)
    proposed_body: str = ""
    proposed_triggers: list[str] = Field(default_factory=list)
    proposed_supersedes: list[str] = Field(
        default_factory=list, description="slugs of the listed memories it would replace"
    )
    evidence: list[str] = Field(
        default_factory=list, description="sentences quoted verbatim from the session"
    )

    @property
    def dura(self) -> Dura:
        return Dura(D=self.D, U=self.U, R=self.R, A=self.A)

    @property
    def mean(self) -> float:
        return self.dura.mean

    @property
    def memory_type(self) -> MemoryType:
        return MemoryType(self.proposed_type)


def score_dura(
    provider: LLMProvider, session_text: str, existing: Sequence[tuple[str, str]] = ()
) -> DuraJudgement:
    """Score a session memory on DURA and draft the long-term memory it would become.

    `existing` lists (slug, title) of long-term memories it might supersede."""
    listed = "\n".join(f"- {slug}: {title}" for slug, title in existing[:20]) or "(none)"
    prompt = render_prompt(
        "dura", session=clip_text(session_text, MAX_TEXT_CHARS)[0], existing=listed
    )
    return provider.complete_json(
        system=prompt.system, prompt=prompt.user, schema=DuraJudgement, max_tokens=2048
    )


class IdentityRewrite(BaseModel):
    """The weekly rewrite of profile/identity.md."""

    identity_markdown: str = Field(min_length=1)
    change_summary: str = ""


def rewrite_identity(
    provider: LLMProvider, *, current_identity: str, memories: str, period: str
) -> IdentityRewrite:
    """Rewrite identity.md from its current text and the memories of `period`."""
    prompt = render_prompt(
        "rewrite_identity",
        period=period,
        current_identity=current_identity.strip() or "(none yet)",
        memories=clip_text(memories, MAX_TEXT_CHARS)[0],
    )
    return provider.complete_json(
        system=prompt.system, prompt=prompt.user, schema=IdentityRewrite, max_tokens=4096
    )


class ProfileChangeReport(BaseModel):
    """The monthly profile/change-reports/YYYY-MM.md."""

    report_markdown: str = Field(min_length=1)
    highlights: list[str] = Field(default_factory=list)


def report_profile_changes(
    provider: LLMProvider,
    *,
    period: str,
    identity_before: str,
    identity_after: str,
    events: str,
) -> ProfileChangeReport:
    """Write the change report for `period` (YYYY-MM) from the two identities and events."""
    prompt = render_prompt(
        "profile_change_report",
        period=period,
        identity_before=identity_before.strip() or "(none)",
        identity_after=identity_after.strip() or "(none)",
        events=clip_text(events, MAX_TEXT_CHARS)[0] or "(none)",
    )
    return provider.complete_json(
        system=prompt.system, prompt=prompt.user, schema=ProfileChangeReport, max_tokens=4096
    )
