"""What the extractor does with its candidates (`_Candidate`) once every stage has run:
overlaps resolved by priority and confidence (`_resolve`), vendor products and module roots
credited, proposals with their sentence, relations over the kept entities, and the file
paths noted. Used by `extraction.pipeline`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from memoryd.extraction import patterns, relations
from memoryd.extraction.linking import _Linked
from memoryd.extraction.patterns import PatternHit
from memoryd.extraction.wordlists import load_common_words
from memoryd.models import EntityType, Predicate, ProposedEntity, ProposedRelation, entity_id

CONTEXT_CHARS = 200
MAX_FILE_NOTES = 20
_WORD_BEFORE_RE = re.compile(r"([A-Za-z]+)[ \t]+$")
_CAPITALISED_BEFORE_RE = re.compile(r"(?<![\w.])([A-Z][a-z]+) $")
_CAPITALISED_AFTER_RE = re.compile(r" ([A-Z][a-z]+)(?![\w])")
_PRODUCT_AFTER_RE = re.compile(r" ([A-Z][A-Za-z0-9]*(?: [A-Z][A-Za-z0-9]*)?)(?![\w-]|\.\w)")
_STYLE_AFTER_RE = re.compile(r" (?:code )?style\b", re.IGNORECASE)
VENDOR_KINDS = frozenset({"cloud", "company"})
VENDOR_PRODUCT_CONFIDENCE = 0.8


@dataclass(frozen=True)
class _Candidate:  # frozen: `replace` makes the variants
    start: int
    end: int
    name: str
    type: EntityType
    confidence: float
    stage: str
    priority: int
    aliases: tuple[str, ...] = ()
    kind: str = ""


def _vendor_products(
    text: str, candidates: list[_Candidate], common: frozenset[str]
) -> list[_Candidate]:
    """A cloud or a company named before a product of its own is the product: "Azure DNS",
    "Google Cloud DNS", "Google CloudDNS" are DNS services, not Azure or Google. The product
    word must look like a name (an acronym, a CamelCase word or a capitalised word that is no
    everyday word or its plural: "AWS Regions" stays AWS). And a company named before "style"
    is a style guide ("Google style", "Airbnb code style"), not the company."""
    out: list[_Candidate] = []
    for cand in candidates:
        vendor = cand.kind in VENDOR_KINDS or (
            cand.type is EntityType.ORGANIZATION and cand.stage == "lexicon"
        )
        if not vendor:
            out.append(cand)
            continue
        if cand.type is EntityType.ORGANIZATION and _STYLE_AFTER_RE.match(text, cand.end):
            continue
        product = _PRODUCT_AFTER_RE.match(text, cand.end)
        end = cand.end
        for word in product.group(1).split() if product else ():
            if word in patterns.TITLE_STOPWORDS or any(
                form in common for form in patterns.noun_forms(word)
            ):
                break  # "AWS CloudWatch Logs" is CloudWatch's logs
            end = text.index(word, end) + len(word)
        if end == cand.end:
            out.append(cand)
            continue
        out.append(
            replace(
                cand,
                end=end,
                name=text[cand.start : end],
                type=EntityType.TOOL,
                confidence=min(cand.confidence, VENDOR_PRODUCT_CONFIDENCE),
                aliases=(),
                kind="",
            )
        )
    return out


def _after_cue(text: str, start: int) -> bool:
    """Whether the word before `start` is a locative cue ("in", "to", "visited")."""
    match = _WORD_BEFORE_RE.search(text, max(0, start - 20), start)
    return match is not None and match.group(1).lower() in patterns.LOCATIVE_CUES


def _inside_longer_name(
    text: str, start: int, end: int, canonical: Mapping[str, tuple[str, EntityType]]
) -> bool:
    """Whether a place name is one word of a longer capitalised name ("Paris Hilton",
    "George Washington", "Boston Dynamics").

    A neighbour counts when it is capitalised, not a chat opener or function word and not
    itself a known name ("Portland Oregon"); an everyday word counts only where its capital
    says name, i.e. before the place in mid-sentence ("met George Washington"), not at a
    sentence start ("Visited Paris") nor after it ("Paris Photos").
    """
    common = load_common_words()
    before = _CAPITALISED_BEFORE_RE.search(text, max(0, start - 30), start)
    after = _CAPITALISED_AFTER_RE.match(text, end)
    for match, mid_sentence in (
        (before, before is not None and _mid_sentence(text, before.start())),
        (after, False),
    ):
        if match is None:
            continue
        word = match.group(1)
        if (
            word in patterns.TITLE_STOPWORDS
            or word in patterns.INTERJECTIONS
            or word.lower() in patterns.LOCATIVE_CUES
            or word.casefold() in canonical
            or (word.lower() in common and not mid_sentence)
        ):
            continue
        return True
    return False


def _mid_sentence(text: str, pos: int) -> bool:
    """Whether the word at `pos` follows other words of its sentence (so its capital is
    a name's, not the sentence's)."""
    before = text[max(0, pos - 10) : pos].rstrip(" \t")
    return bool(before) and (before[-1].isalnum() or before[-1] == ",")


def _from_hit(hit: PatternHit, stage: str) -> _Candidate:
    return _Candidate(
        hit.start,
        hit.end,
        hit.name,
        hit.type,
        hit.confidence,
        stage,
        hit.priority,
        hit.aliases,
        hit.kind,
    )


def _module_roots(
    scan: patterns.PatternScan, canonical: Mapping[str, tuple[str, EntityType]]
) -> list[_Candidate]:
    """`spacy.pipeline.EntityRuler` mentions spaCy when its root is a name we know."""
    out: list[_Candidate] = []
    for start, _end, module in scan.modules:
        root = module.split(".", 1)[0]
        target = canonical.get(root.casefold())
        if target is not None:
            name, etype = target
            out.append(
                _Candidate(
                    start,
                    start + len(root),
                    name,
                    etype,
                    patterns.MODULE_ROOT_CONFIDENCE,
                    "pattern",
                    patterns.PRIORITY_SHAPE,
                    (root,) if root != name else (),
                    "module-root",
                )
            )
    return out


def _resolve(
    candidates: Sequence[_Candidate], shields: Sequence[tuple[int, int]]
) -> list[_Candidate]:
    """Keep the best candidate of each overlapping set, none inside a path or URL.

    A candidate may cover a whole shield (`Node.js` looks like a file name; a URL entity is
    its own shield) but not sit inside one (`react` in `src/react/app.ts`), and module roots
    are allowed at the start of their own module path.
    """
    # Ties (two matchers or stages proposing one span) go by what they propose, never by the
    # order they were found in: that order follows how the matchers were grown.
    ranked = sorted(
        candidates,
        key=lambda c: (
            c.priority,
            -(c.end - c.start),
            c.start,
            -c.confidence,
            c.type.value,
            c.name,
            c.stage,
            c.kind,
            c.aliases,
        ),
    )
    walls = sorted(shields)
    wall_starts = [start for start, _ in walls]
    starts: list[int] = []  # accepted spans never overlap, so sorted starts find neighbours
    accepted: list[_Candidate] = []
    for cand in ranked:
        if cand.kind != "module-root" and _inside_shield(cand, walls, wall_starts):
            continue
        at = bisect.bisect_right(starts, cand.start)
        if at and accepted[at - 1].end > cand.start:
            continue
        if at < len(accepted) and accepted[at].start < cand.end:
            continue
        starts.insert(at, cand.start)
        accepted.insert(at, cand)
    return accepted


def _inside_shield(
    cand: _Candidate, walls: Sequence[tuple[int, int]], wall_starts: Sequence[int]
) -> bool:
    """Whether the candidate overlaps a shield without covering it whole."""
    at = max(bisect.bisect_right(wall_starts, cand.start) - 1, 0)
    while at < len(walls) and walls[at][0] < cand.end:
        w_start, w_end = walls[at]
        if cand.start < w_end and not (cand.start <= w_start and w_end <= cand.end):
            return True
        at += 1
    return False


def _sentence_of(
    start: int, sentences: Sequence[tuple[int, int]], starts: Sequence[int]
) -> tuple[int, int] | None:
    at = bisect.bisect_right(starts, start) - 1
    if at >= 0 and start < sentences[at][1]:
        return sentences[at]
    return None


def _proposal(
    cand: _Candidate, text: str, sentences: Sequence[tuple[int, int]], starts: Sequence[int]
) -> _Linked:
    """A candidate as linking takes it (`linking.link_records`), with its sentence."""
    sentence = _sentence_of(cand.start, sentences, starts)
    context = None
    if sentence is not None:
        context = " ".join(text[sentence[0] : sentence[1]].split())[:CONTEXT_CHARS]
    return _Linked(
        cand.name,
        cand.type,
        cand.confidence,
        [a for a in dict.fromkeys(cand.aliases) if a != cand.name],
        context,
        cand.stage,
        [(cand.start, cand.end)],
        entity_id(cand.type, cand.name),
    )


def _relations(
    raw: Sequence[relations.RawRelation], entities: Sequence[ProposedEntity]
) -> list[ProposedRelation]:
    """Spans to entity ids; self-loops (both ends linked to one entity) and repeats dropped."""
    by_span = {span: e.id for e in entities for span in e.spans}
    best: dict[tuple[str, Predicate, str], ProposedRelation] = {}
    for rel in raw:
        subject = "memory" if rel.subject is None else by_span.get(rel.subject)
        obj = "memory" if rel.object is None else by_span.get(rel.object)
        if subject is None or obj is None or subject == obj:
            continue
        key = (subject, rel.predicate, obj)
        current = best.get(key)
        if current is None or rel.confidence > current.confidence:
            best[key] = ProposedRelation(
                subject=subject,
                predicate=rel.predicate,
                object=obj,
                confidence=rel.confidence,
                evidence=rel.evidence,
            )
    return list(best.values())


def _path_notes(scan: patterns.PatternScan, accepted: Sequence[_Candidate]) -> list[str]:
    """File and module paths, which are context rather than entities."""
    covered = [(c.start, c.end) for c in accepted if c.kind != "module-root"]
    covered_starts = [start for start, _ in covered]
    notes: list[str] = []
    files: list[str] = []
    for start, end, path in scan.files:
        at = bisect.bisect_right(covered_starts, start) - 1
        if at < 0 or covered[at][1] < end:  # a name that looks like a file (Node.js) is no path
            files.append(path)
    unique = list(dict.fromkeys(files))
    notes += [f"file: {path}" for path in unique[:MAX_FILE_NOTES]]
    if len(unique) > MAX_FILE_NOTES:
        notes.append(f"file: … and {len(unique) - MAX_FILE_NOTES} more")
    notes += [f"module: {m}" for m in dict.fromkeys(module for _, _, module in scan.modules)]
    return notes


def _shift(entity: ProposedEntity, offset: int) -> ProposedEntity:
    """Spans relative to the body: title occurrences are dropped from `spans`. In place,
    not a copy: linking made every entity of the extraction its own (`linking._merge`)."""
    if offset:
        entity.spans = [(s - offset, e - offset) for s, e in entity.spans if s >= offset]
    return entity
