"""Entity linking: one key per name however it is written, and merging onto known entities.

`normalise_name` is the merge key: "FastAPI", "fastapi", "FastAPIs", "Fast-API" and "fast api"
share one, and so do 記憶引擎 and 记忆引擎. It is a key, not a display name: it drops
separators ("VS Code" = "VSCode"), so two different names can collide, which is why a proposal
is only merged onto a known entity of another type when that entity is the only candidate.
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memoryd.extraction.generic_names import GENERIC_TECH_WORDS, generic_word
from memoryd.extraction.patterns import has_cjk
from memoryd.extraction.wordlists import load_common_words
from memoryd.models import EntityType, ProposedEntity, entity_id


class KnownEntity(BaseModel):
    """An entity the graph already holds, passed in so extraction can find and link it."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    type: EntityType
    aliases: list[str] = Field(default_factory=list)


LINKED_MIN_CONFIDENCE = 0.8
"""A proposal of another stage that matches an entity the graph already holds is at least this
certain: a CamelCase guess the graph knows is no longer a guess."""

_WORD_RE = re.compile(r"[^\W_]+|[+#]+")
_QUERY_TOKEN_RE = re.compile(r"[\w][\w.+#/-]*[\w+#]|[\w]", re.UNICODE)
"""A query token: an identifier with dots, dashes or slashes is one token ("ecommerce-api",
"Node.js", "shadcn/ui"), never split into parts that could name something else."""
_SINGULAR_KEEP = ("ss", "us", "is")
"""Endings whose final s is not a plural: class, status, Redis, analysis."""


def _singular(word: str) -> str:
    """English plural to singular for ASCII words of 4+ letters, reading the original case:
    "APIs" and "FastAPIs" lose their s, "NodeJS" (capital S) and "Redis" (-is) keep it."""
    if len(word) < 4 or not word.isascii() or not word.isalpha() or not word.endswith("s"):
        return word
    if word[-2].isupper():
        return word[:-1]  # an acronym's plural: APIs, URLs
    if word.lower().endswith(_SINGULAR_KEEP):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    return word[:-1]


@cache
def _zhconv() -> Any:
    """zhconv with its table loaded through an explicit path: its default loader leaves the
    file open (a ResourceWarning, an error under pytest's filterwarnings=error)."""
    import zhconv

    module = importlib.import_module("zhconv.zhconv")
    module.loaddict(str(Path(str(module.__file__)).with_name("zhcdict.json")))
    return zhconv


def _simplified(name: str) -> str:
    return str(_zhconv().convert(name, "zh-cn"))


@lru_cache(maxsize=65536)
def normalise_name(name: str) -> str:
    """The merge key of a name: NFKC, simplified Chinese, the last English word made singular,
    casefolded, separators dropped."""
    text = unicodedata.normalize("NFKC", name)
    if has_cjk(text):
        text = _simplified(text)
    words = _WORD_RE.findall(text.lstrip("@"))
    if not words:
        return text.casefold().strip()
    words[-1] = _singular(words[-1])
    return "".join(words).casefold()


def _plural_shaped(name: str) -> bool:
    words = _WORD_RE.findall(name)
    return bool(words) and _singular(words[-1]) != words[-1]


def _display_rank(entity: ProposedEntity | _Linked, order: int) -> tuple[float, bool, bool, int]:
    """Higher is a better display name: confident, not a plural, has capitals, seen first."""
    return (
        entity.confidence,
        not _plural_shaped(entity.name),
        entity.name != entity.name.lower(),
        -order,
    )


def _dedupe(items: Sequence[str], exclude: str) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item != exclude:
            seen.setdefault(item, None)
    return list(seen)


class KnownIndex:
    """Known entities by id and by normalised name or alias; built once per set of entities
    and grown (`add`) as the graph gains some."""

    def __init__(self, known: Sequence[KnownEntity]) -> None:
        self.by_id: dict[str, KnownEntity] = {}
        self.by_key: dict[str, list[KnownEntity]] = {}
        self.add(known)

    def add(self, known: Sequence[KnownEntity]) -> None:
        touched: set[str] = set()
        for entity in known:
            self.by_id.setdefault(entity.id, entity)
            for surface in (entity.name, *entity.aliases):
                key = normalise_name(surface)
                bucket = self.by_key.setdefault(key, [])
                if entity not in bucket:
                    bucket.append(entity)
                    touched.add(key)
        for key in touched:
            # `find` takes a bucket's first: the entity named so before one aliased so, then
            # by id; never by arrival, which is the history of a grown index.
            self.by_key[key].sort(key=lambda k: (normalise_name(k.name) != key, k.id))

    def find(self, proposal: ProposedEntity | _Linked) -> KnownEntity | None:
        hit = self.by_id.get(proposal.id)
        if hit is not None:
            return hit
        for surface in (proposal.name, *proposal.aliases):
            candidates = self.by_key.get(normalise_name(surface), [])
            same_type = [k for k in candidates if k.type == proposal.type]
            if same_type:
                return same_type[0]
            if len(candidates) == 1:
                return candidates[0]
        return None


@dataclass
class _Linked:
    """A proposal as linking reads it, with its id made once; built into a `ProposedEntity`
    only when its group is merged (a pydantic copy per step cost more than the linking)."""

    name: str
    type: EntityType
    confidence: float
    aliases: list[str]
    context: str | None
    stage: str
    spans: list[tuple[int, int]]
    id: str

    @classmethod
    def of(cls, p: ProposedEntity, pid: str) -> _Linked:
        return cls(p.name, p.type, p.confidence, p.aliases, p.context, p.stage, p.spans, pid)


def _onto_known(proposal: _Linked, known: KnownEntity) -> _Linked:
    aliases = _dedupe([*proposal.aliases, proposal.name], exclude=known.name)
    etype = EntityType(known.type)
    return _Linked(
        known.name,
        etype,
        # the known stage set its own confidence (lower for everyday words); keep it
        proposal.confidence
        if proposal.stage == "known"
        else max(proposal.confidence, LINKED_MIN_CONFIDENCE),
        aliases,
        proposal.context,
        proposal.stage,
        proposal.spans,
        entity_id(etype, known.name),
    )


def _merge(group: list[tuple[int, _Linked]], linked_id: str | None) -> ProposedEntity:
    """One entity from several proposals: the best name, max confidence, union of the rest."""
    if linked_id is not None:
        best = next(p for _, p in group if p.id == linked_id)
    else:
        best = max(group, key=lambda item: _display_rank(item[1], item[0]))[1]
    surfaces = [s for _, p in group for s in (p.name, *p.aliases)]
    spans = sorted({span for _, p in group for span in p.spans})
    context = next((p.context for _, p in group if p.context), None)
    return ProposedEntity(
        name=best.name,
        type=best.type,
        confidence=max(p.confidence for _, p in group),
        aliases=_dedupe(surfaces, exclude=best.name),
        context=context,
        stage=best.stage,
        spans=spans,
    )


def link(proposed: Sequence[ProposedEntity], known: Sequence[KnownEntity]) -> list[ProposedEntity]:
    """Map proposals onto known entities (by id, alias or normalised name) and merge the
    duplicates of one text, in order of first appearance.

    A linked proposal takes the known canonical name and type and keeps its surface form as
    an alias. Unlinked proposals with the same normalised name merge whatever their types,
    under the type and name of the most confident one.
    """
    return link_with_index(proposed, KnownIndex(known))


def link_with_index(proposed: Sequence[ProposedEntity], index: KnownIndex) -> list[ProposedEntity]:
    """`link` with a prebuilt index, for callers that link many texts against one graph."""
    return link_records([_Linked.of(p, p.id) for p in proposed], index)


def link_records(proposed: Sequence[_Linked], index: KnownIndex) -> list[ProposedEntity]:
    """`link_with_index` of proposals made as `_Linked` records (extraction's own, whose
    fields are right by construction): each merged entity is the one model built."""
    linked_ids: set[str] = set()
    groups: dict[str, list[tuple[int, _Linked]]] = {}
    for order, item in enumerate(proposed):
        target = index.find(item)
        if target is not None:
            item = _onto_known(item, target)
            key = f"id:{item.id}"
            linked_ids.add(key)
        else:
            key = f"name:{normalise_name(item.name)}"
        groups.setdefault(key, []).append((order, item))

    # an unlinked spelling of a linked entity ("postgres" when "Postgres" was linked) joins it
    by_name: dict[str, str] = {}
    for key in linked_ids:
        entity = groups[key][0][1]
        for surface in (entity.name, *entity.aliases):
            by_name.setdefault(f"name:{normalise_name(surface)}", key)
    for key in [k for k in groups if k.startswith("name:") and k in by_name]:
        groups[by_name[key]].extend(groups.pop(key))

    merged = [
        (
            min(order for order, _ in group),
            _merge(sorted(group, key=lambda item: item[0]), key[3:] if key in linked_ids else None),
        )
        for key, group in groups.items()
    ]
    merged.sort(key=lambda item: item[0])
    return [entity for _, entity in merged]


def query_name_grams(query: str, segments: Sequence[str] = (), max_words: int = 1) -> list[str]:
    """The parts of a query that may name an entity, for linking a query to known entities.

    Whole tokens and runs of up to `max_words` of them, then the Chinese words among
    `segments` (a query's jieba words) and adjacent pairs of them. A hyphenated or dotted
    identifier is one token: "ecommerce-api" offers itself, never "ecommerce" or "api". A
    token that is an everyday word or developer jargon in lower case ("cluster", "dev",
    "solid") names nothing, nor does jargon in any case ("API", "CLI"): a name is matched
    as a name, not as a common word. Written with its own capitals ("Solid", "Linear"), a
    common word is a name again; a compound ("webshop") is a name.
    """
    common = load_common_words()
    tokens = [t.strip(".-/") for t in _QUERY_TOKEN_RE.findall(query)]
    # the first word's capital is the sentence's, not a name's
    common_at = [_common_token(t.lower() if i == 0 else t, common) for i, t in enumerate(tokens)]
    grams: list[str] = []
    for size in range(1, max(1, max_words) + 1):
        for i in range(len(tokens) - size + 1):
            if all(common_at[i : i + size]):
                continue
            grams.append(" ".join(tokens[i : i + size]))
    chinese = [s for s in segments if has_cjk(s)]
    grams.extend(chinese)
    grams.extend(
        segments[i] + segments[i + 1]
        for i in range(len(segments) - 1)
        if has_cjk(segments[i]) and has_cjk(segments[i + 1])
    )
    return grams


def _common_token(token: str, common: frozenset[str]) -> bool:
    return token.lower() in GENERIC_TECH_WORDS or generic_word(token, common, compounds=False)
