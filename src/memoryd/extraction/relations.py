"""Relation rules over sentences, English and Chinese, mapped to the 11 predicates. Pure Python.

A rule is a regex with named slots (the table is `extraction.relation_rules`). The slot nearest
the end of the match takes every entity in its clause ("uses React, Vite and Vitest"); an
earlier slot takes the entity closest to the verb ("from React and Redux to Solid" → Redux).
Single-slot rules find their subject in the entity right before the verb ("FastAPI uses
Starlette"); without one the subject is the memory itself ("We use Kuzu" → memory uses Kuzu).

Confidence: each rule has its own; decision or causal language in the sentence (决定, because)
adds 0.05 each and is reported in the notes; a relation is never more than 0.3 above the
confidence of its least certain entity, so a guessed entity cannot carry a confident edge.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from memoryd.extraction.patterns import CJK_CHARS, has_cjk
from memoryd.extraction.relation_rules import Kind, Rule, rules
from memoryd.models import EntityType, Predicate, ProposedEntity, ProposedRelation

Span = tuple[int, int]

MAX_CONFIDENCE = 0.95
CUE_BOOST = 0.05
ENTITY_MARGIN = 0.3
SLOT_GUESS_CONFIDENCE = 0.45
EVIDENCE_CHARS = 200
LEFT_SLOT_CHARS = 60

SUPERSEDE_PREFERS = 0.8
CITES_LINK = 0.85


@dataclass(frozen=True)
class Mention:
    """An entity occurrence before linking."""

    start: int
    end: int
    type: EntityType
    confidence: float


@dataclass(frozen=True)
class RawRelation:
    """A relation between spans (None is the memory), turned into entity ids after linking."""

    subject: Span | None
    predicate: Predicate
    object: Span | None
    confidence: float
    evidence: str
    rule: str


@dataclass(frozen=True)
class SlotGuess:
    start: int
    end: int
    name: str
    type: EntityType
    confidence: float


@dataclass
class RelationFindings:
    relations: list[RawRelation] = field(default_factory=list)
    guesses: list[SlotGuess] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


CLAUSE_CUT_RE = re.compile(
    r"\b(?:because|since|but|so|which|while|when|where|instead|rather|although|though|unless|"
    r"until|after|before|if|whereas|then|as)\b|\bto\s+(?:be|do|make|get|build|avoid|keep|"
    r"handle|store|run|reduce|speed|cut|fix|support)\b|因为|由于|所以|但是?|而且|然后|以便|为了|"
    r"因此|并且|不过|导致",
    re.IGNORECASE,
)
SUBJECT_GAP_RE = re.compile(
    r"^(?:[\s,]|(?:also|now|still|already|internally|heavily|mostly|mainly|only|directly|"
    r"currently|itself|which|that|then|really|actually|can|could|will|would|should|must|may|"
    r"might|does|did|do|has|have|had|is|are|was|were|now)\b|也|还|目前|现在|已经|主要|都|则|"
    r"仍然|一直|会|将|就|本身|可以|能)*$",
    re.IGNORECASE,
)
CHAIN_GAP_RE = re.compile(r"^\s*(?:on|in|inside|atop|on top of|在|上的?|之上)?\s*$", re.IGNORECASE)
SLOT_ARTICLE_RE = re.compile(r"^\s*(?:(?:the|a|an|our|their|its|my|your|this|that)\s+)?")
SLOT_NAME_RE = re.compile(r"`(?P<code>[A-Za-z][\w.+#/-]*)`|(?P<word>[A-Za-z][\w.+#-]*[\w+#])")
SLOT_PLACE_ZH_RE = re.compile(rf"^\s*(?P<place>[{CJK_CHARS}]{{2,6}}?)(?:的|、|和|与|以及|$)")

DECISION_WORDS = (
    "decided to",
    "decide to",
    "decision",
    "we chose",
    "chose",
    "chosen",
    "went with",
    "settled on",
    "going with",
    "opted for",
    "opt for",
)
CAUSAL_WORDS = (
    "because",
    "therefore",
    "due to",
    "caused by",
    "as a result",
    "so that",
    "so we",
    "in order to",
    "leads to",
    "led to",
    "results in",
    "resulted in",
    "fixed by",
    "resolved by",
    "thus",
    "hence",
)
DECISION_CUES = re.compile(
    rf"\b(?:{'|'.join(DECISION_WORDS)})\b|决定|决策|采用|选定|敲定|拍板", re.IGNORECASE
)
CAUSAL_CUES = re.compile(
    rf"\b(?:{'|'.join(CAUSAL_WORDS)})\b|因为|所以|由于|导致|因此|为了|以便|从而", re.IGNORECASE
)
CUES = (("decision", DECISION_CUES, DECISION_WORDS), ("causal", CAUSAL_CUES, CAUSAL_WORDS))
"""Each cue regex with its English words: in ASCII text a cue is one of them in lower case."""


# --- matching ------------------------------------------------------------------------------


class _SentenceContext:
    """The mentions of one sentence, growing as empty slots get guessed entities."""

    def __init__(self, text: str, start: int, end: int, mentions: list[Mention]) -> None:
        self.text = text
        self.start = start
        self.end = end
        self.mentions = sorted(mentions, key=lambda m: m.start)

    def within(self, start: int, end: int) -> list[Mention]:
        return [m for m in self.mentions if start <= m.start < end]

    def add(self, mention: Mention) -> None:
        self.mentions.append(mention)
        self.mentions.sort(key=lambda m: m.start)


def _cut_region(text: str, start: int, end: int, extra: str | None) -> int:
    """End of the clause that starts at `start` (before because/但是/…)."""
    cut = end
    found = CLAUSE_CUT_RE.search(text, start, end)
    if found and found.start() > start:
        cut = found.start()
    if extra:
        more = re.search(extra, text[start:cut], re.IGNORECASE)
        if more and more.start() > 0:
            cut = start + more.start()
    return cut


_NEXT_CAPITALISED_RE = re.compile(r" [A-Z][a-z]")


def _guess_slot(
    text: str, start: int, end: int, rule: Rule, common: frozenset[str]
) -> SlotGuess | None:
    """An entity for an empty slot, when the slot starts with something name-shaped."""
    if rule.slot_type is None:
        return None
    region = text[start:end]
    if rule.slot_type is EntityType.PLACE:
        place = SLOT_PLACE_ZH_RE.match(region)
        if place:
            s = start + place.start("place")
            return SlotGuess(
                s,
                s + len(place.group("place")),
                place.group("place"),
                rule.slot_type,
                SLOT_GUESS_CONFIDENCE,
            )
    lead = SLOT_ARTICLE_RE.match(region)
    offset = lead.end() if lead else 0
    found = SLOT_NAME_RE.match(region, offset)
    if not found:
        return None
    group = "code" if found.group("code") else "word"
    name = found.group(group)
    if group == "word" and not name[0].isupper():
        return None  # only capitalised or `backticked` words look like names
    if name.lower() in common or (name.isupper() and len(name) <= 4) or len(name) < 2:
        return None
    if group == "word" and _NEXT_CAPITALISED_RE.match(region, found.end(group)):
        return None  # one word of a longer name ("a Simplified Git Flow"): its type is unknown
    s = start + found.start(group)
    return SlotGuess(s, s + len(name), name, rule.slot_type, SLOT_GUESS_CONFIDENCE)


def _slot_mentions(
    ctx: _SentenceContext,
    span: Span,
    last: bool,
    rule: Rule,
    common: frozenset[str],
    findings: RelationFindings,
) -> list[Mention]:
    """Mentions filling one slot: all in the clause for the last slot, else the nearest one."""
    g_start, g_end = span
    if last:
        g_end = _cut_region(ctx.text, g_start, g_end, rule.extra_cut)
    found = ctx.within(g_start, g_end)
    if found:
        lead = len(ctx.text[g_start : found[0].start]) - len(
            ctx.text[g_start : found[0].start].lstrip()
        )
        if found[0].start - g_start - lead > rule.max_gap:
            return []
        return found if last else [found[-1]]
    guess = _guess_slot(ctx.text, g_start, g_end, rule, common)
    if guess is None:
        return []
    findings.guesses.append(guess)
    mention = Mention(guess.start, guess.end, guess.type, guess.confidence)
    ctx.add(mention)
    return [mention]


def _adjacent_subject(ctx: _SentenceContext, verb_start: int, rule: Rule) -> Mention | None:
    before = [m for m in ctx.mentions if m.end <= verb_start]
    if not before:
        return None
    candidate = before[-1]
    if not SUBJECT_GAP_RE.match(ctx.text[candidate.end : verb_start]):
        return None
    if rule.subject_types is not None and candidate.type not in rule.subject_types:
        return None
    return candidate


def _confidence(base: float, boost: float, *mentions: Mention | None) -> float:
    conf = min(base + boost, MAX_CONFIDENCE)
    for mention in mentions:
        if mention is not None:
            conf = min(conf, mention.confidence + ENTITY_MARGIN)
    return round(conf, 3)


def _span(m: Mention | None) -> Span | None:
    return None if m is None else (m.start, m.end)


def _apply_rule(
    ctx: _SentenceContext,
    rule: Rule,
    match: re.Match[str],
    boost: float,
    evidence: str,
    common: frozenset[str],
    findings: RelationFindings,
) -> None:
    spans: dict[str, Span] = {
        g: (ctx.start + match.start(g), ctx.start + match.end(g))
        for g in ("old", "new", "obj", "a", "b")
        if g in rule.regex.groupindex
    }
    last_group = max(spans, key=lambda g: spans[g][0])
    if rule.left is not None:
        end = ctx.start + match.start()
        start = max(ctx.start, end - LEFT_SLOT_CHARS)
        comma = max(ctx.text.rfind("，", start, end), ctx.text.rfind(";", start, end))
        spans[rule.left] = (max(start, comma + 1), end)
    slots = {
        g: _slot_mentions(ctx, span, g == last_group, rule, common, findings)
        for g, span in spans.items()
    }
    out = findings.relations

    def emit(subj: Mention | None, pred: Predicate, obj: Mention | None, base: float) -> None:
        if subj is not None and obj is not None and (subj.start, subj.end) == (obj.start, obj.end):
            return
        out.append(
            RawRelation(
                _span(subj),
                pred,
                _span(obj),
                _confidence(base, boost, subj, obj),
                evidence,
                rule.name,
            )
        )

    if rule.kind is Kind.SUPERSEDE:
        for new in slots["new"]:
            if not slots["old"]:
                break
            emit(None, Predicate.PREFERS, new, SUPERSEDE_PREFERS)
            for old in slots["old"]:
                emit(new, Predicate.SUPERSEDES, old, rule.confidence)
                emit(old, Predicate.SUPERSEDED_BY, new, rule.confidence)
    elif rule.kind is Kind.PAIR:
        for a in slots["a"]:
            for b in slots["b"]:
                emit(a, rule.predicate, b, rule.confidence)
    else:
        objects = slots["obj"]
        if not objects:
            return
        subject = _adjacent_subject(ctx, ctx.start + match.start(), rule)
        if subject is None and not rule.memory_subject:
            return
        previous: Mention | None = None
        for obj in objects:
            chained = (
                rule.predicate is Predicate.RUNS_ON
                and previous is not None
                and CHAIN_GAP_RE.match(ctx.text[previous.end : obj.start]) is not None
            )
            if chained:
                emit(previous, rule.predicate, obj, rule.confidence - 0.05)
            else:
                emit(subject, rule.predicate, obj, rule.confidence)
            previous = obj


def find_relations(
    text: str,
    sentences: Sequence[Span],
    mentions: Sequence[Mention],
    cited: Sequence[Span],
    common_words: frozenset[str],
) -> RelationFindings:
    """Apply every rule to every sentence; `cited` spans (URLs, RFCs) are cited by the memory."""
    findings = RelationFindings()
    seen_cues: set[tuple[str, str]] = set()
    ordered = sorted(mentions, key=lambda m: m.start)
    starts = [m.start for m in ordered]
    # A rule's trigger is literal keywords: one that no sentence holds is not in the
    # sentences joined either, so each rule's keywords are looked for in the whole text once
    # (a substring test, not the trigger regex), and its regex runs only on the sentences
    # that hold one of those found. Trying 32 triggers on every sentence was most of this.
    joined = "\n".join(text[s_start:s_end].lower() for s_start, s_end in sentences)
    chinese_text = has_cjk(joined)
    live: list[tuple[Rule, tuple[str, ...]]] = []
    for rule in rules():
        if rule.chinese and not chinese_text:
            continue
        found = tuple(word for word in rule.keywords if word in joined)
        if found or not rule.keywords:
            live.append((rule, found))
    # A cue found in a sentence is found in the sentences joined by newlines too (its \b
    # sees a newline there as at the sentence's edge), so a text without one skips the
    # per-sentence searches; a sentence's context and evidence are made at its first match.
    # In ASCII text (lower-cased exactly) a cue's words are looked for as substrings first.
    ascii_text = text.isascii()
    cue_sets = [
        (label, cues)
        for label, cues, words in CUES
        if (not ascii_text or any(word in joined for word in words))
        and cues.search("\n".join(text[s_start:s_end] for s_start, s_end in sentences))
    ]
    keywords = {word for _, found in live for word in found}
    for s_start, s_end in sentences:
        sentence = text[s_start:s_end]
        boost = 0.0
        for label, cues in cue_sets:
            cue = cues.search(sentence)
            if cue:
                boost += CUE_BOOST
                word = cue.group().lower()
                if (label, word) not in seen_cues:
                    seen_cues.add((label, word))
                    findings.notes.append(f"{label} language: {word}")
        chinese = chinese_text and has_cjk(sentence)
        lowered = sentence.lower()
        held = {word for word in keywords if word in lowered}
        ctx: _SentenceContext | None = None
        evidence = ""
        for rule, found in live:
            if rule.chinese and not chinese:
                continue
            if found and held.isdisjoint(found):
                continue
            for match in rule.regex.finditer(sentence):
                if ctx is None:
                    inside = ordered[bisect_left(starts, s_start) : bisect_left(starts, s_end)]
                    ctx = _SentenceContext(text, s_start, s_end, inside)
                    evidence = " ".join(sentence.split())[:EVIDENCE_CHARS]
                _apply_rule(ctx, rule, match, boost, evidence, common_words, findings)
    for span in cited:
        ordered_hit = next((m for m in ordered if (m.start, m.end) == span), None)
        if ordered_hit is not None:
            findings.relations.append(
                RawRelation(
                    None,
                    Predicate.CITES,
                    span,
                    _confidence(CITES_LINK, 0.0, ordered_hit),
                    text[span[0] : span[1]],
                    "cites-link",
                )
            )
    return findings


def mention_relations(entities: Sequence[ProposedEntity], text: str) -> list[ProposedRelation]:
    """`memory mentions X` for every entity, as confident as the entity itself."""
    relations: list[ProposedRelation] = []
    for entity in entities:
        surface = ""
        if entity.spans:
            start, end = entity.spans[0]
            surface = text[start:end]
        relations.append(
            ProposedRelation(
                subject="memory",
                predicate=Predicate.MENTIONS,
                object=entity.id,
                confidence=entity.confidence,
                evidence=surface or entity.name,
            )
        )
    return relations
