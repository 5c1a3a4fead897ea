"""DURA scoring of a session memory, and the promotion it proposes.

Two scorers give the same result shape, a `PromotionProposal` whose `dura.by` says how it was
made:

* `score_with_llm` — the configured provider scores with structured output (prompt
  `llm/prompts/dura.md`) and drafts the long-term memory; `dura.by` is `llm:<model>`. The
  quotes it offers as evidence are kept only when they occur verbatim in the session.
* `score_heuristic` — **heuristic-v1**, offline and transparent, used when no LLM is
  configured (or asked for with `analyze-session --heuristic`). It never invents text: the
  title, body, triggers and evidence it proposes are sentences and words of the session.

heuristic-v1, rule by rule (README § "DURA scoring" says the same):

1. The body is split into sections (`## …`) and sentences (`.!?` before a space, `。！？；`,
   line breaks; list markers dropped). Prose sections give evidence; `Files changed`,
   `Commands run` and `Errors` only give hooks; the LLM `## Summary` is not read.
2. A sentence is *evidence* when it carries a cue, in English or Chinese:
   decision ("we decided", "switched from … to …", "instead of", "going forward", 决定,
   改用, 换成, 迁移到, 不再用 …), rule ("always", "never", "must", "from now on", 以后, 一律,
   必须, 禁止, 不要 …) or lesson ("root cause", "turned out", "the fix was", "pitfall",
   根因, 原来是, 踩坑, 注意 …). Questions are never evidence, nor is a decision put off
   ("nothing decided", "needs a decision", 再决定, 待定); a sentence about a typo, a rename or
   formatting is *trivial*.
3. D (decision-worthy) = 0.22 per decision sentence (at most 3) + 0.15 per rule (at most 2)
   + 0.12 per lesson (at most 2) + 0.15 when one states its reason ("because", "so that",
   因为, 为了 …) + 0.1 when one names a hook; halved when all evidence is trivial.
4. U (useful in future) = 0.15 + 0.3 with a rule + 0.2 with a lesson + 0.2 when evidence
   names a hook + 0.1 per decision (at most 2); halved when all evidence is trivial; 0.1
   without evidence.
5. R (recallable) = 0.12 per linked entity (at most 4) + 0.1 per file path (at most 3)
   + 0.12 per version (`v1.2`, `==0.22`, `@4.1`, or three parts `0.11.3`; at most 2)
   + 0.06 per `code` span (at most 3) + 0.1 per named error (at most 2) + 0.05 for a date.
6. A (accurate) = 0.6 + 0.1 per verification cue in the session (tests pass, measured, p95,
   confirmed, 测试通过, 实测 …; at most 3) − 0.12 per hedged evidence sentence (maybe, might,
   I think, TODO, 也许, 可能 …; at most 3) − 0.1 per question left unanswered (at most 3:
   asked, and no later sentence shares two of its words).
7. The proposal: `preference` when evidence says prefer/like (偏好, 喜欢), `warning` for a
   lesson phrased as a rule against something, `playbook` for three or more numbered steps,
   `decision` when a decision sentence exists, else `fact`. Title: the strongest evidence
   sentence (decision 3, rule 2, lesson 1.5, reason 1, hooks 0.5 each up to 2; trivial −2,
   hedged −1, a request in `Asked` −1), cut at 80 characters. Body: up to six evidence
   sentences, quoted. Triggers: the hooks the evidence names. Supersedes: long-term
   memories of the scope (found by the service) whose title names what a "from X to Y" /
   "instead of X" / 不再用 X sentence left.
8. Each score is clamped to [0, 1] and rounded to two decimals.

`refusal` is the one place that says a memory may not be scored (a sensitive scope: nothing
of it may reach an LLM, nor the promotions table in plain text).

Over 600 lines: both DURA scorers, their cue tables in two languages and the refusal rules are
measured together on one labelled set (tests/data/dura).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from memoryd.errors import MemorydError
from memoryd.governance.store import GovernanceStore
from memoryd.llm.base import LLMProvider
from memoryd.models import (
    CJK,
    Dura,
    Memory,
    MemoryType,
    PromotionProposal,
    ScopeInfo,
    utcnow,
)

logger = logging.getLogger(__name__)

HEURISTIC = "heuristic-v1"
AnalysisMode = Literal["auto", "llm", "heuristic"]
TITLE_CHARS = 80
MAX_EVIDENCE = 6
MAX_TRIGGERS = 8
MAX_QUOTE_CHARS = 400

HOOK_SECTIONS = frozenset({"files changed", "commands run", "errors"})
SKIPPED_SECTIONS = frozenset({"summary"})


@dataclass(frozen=True)
class SessionText:
    """What a scorer reads: a session memory without its LLM summary, and the entities the
    extraction linked in it."""

    slug: str
    title: str
    text: str
    fingerprint: str
    scope_hash: str
    entities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Candidate:
    """A long-term memory of the same scope that the session might supersede."""

    slug: str
    title: str


def sensitive(memory: Memory, scope: ScopeInfo | None) -> bool:
    """Whether `memory` is sensitive, by its own flag or its scope's: the one check that
    keeps it from any LLM and its text out of governance.db (scoring and supersede judging)."""
    return memory.sensitive or (scope is not None and scope.sensitive)


def refusal(memory: Memory, scope: ScopeInfo | None) -> str | None:
    """Why `memory` may not be scored, or None: a sensitive memory never reaches an LLM, and
    its sentences never enter governance.db."""
    if sensitive(memory, scope):
        return "its scope is sensitive: it is never sent to an LLM nor quoted in the queue"
    if memory.meta.type is not MemoryType.SESSION:
        return f"it is a {memory.meta.type.value}: only session memories are scored"
    return None


def promotes(proposal: PromotionProposal, threshold: float) -> bool:
    """A mean at or above the threshold queues a pending promotion."""
    return proposal.dura.mean >= threshold - 1e-9


# --------------------------------------------------------------------------- heuristic-v1


_META = "\\()[]{}?*+.^$|"


def _literals(pattern: str) -> list[str] | None:
    """Lower-case strings one of which every match of `pattern` contains, or None when no
    such list is cheap to read off (the regex then always runs)."""
    found: list[str] = []
    depth, start, alternatives = 0, 0, []
    for i, char in enumerate(pattern):
        if char == "(" and (i == 0 or pattern[i - 1] != "\\"):
            depth += 1
        elif char == ")" and pattern[i - 1] != "\\":
            depth -= 1
        elif char == "|" and depth == 0:
            alternatives.append(pattern[start:i])
            start = i + 1
    alternatives.append(pattern[start:])
    for alternative in alternatives:
        text = alternative.removeprefix("\\b")
        options = [text]
        group = re.match(r"\(\?:([^()]*)\)(?![?*{])", text)
        if group:
            options = [option + text[group.end() :] for option in group.group(1).split("|")]
        for option in options:
            head = re.match(r"[^\\()\[\]{}?*+.^$|]+", option)
            literal = head.group(0) if head else ""
            if head and option[head.end() : head.end() + 1] in ("?", "*", "{"):
                literal = literal[:-1]
            if len(literal.strip()) < (1 if literal[:1] > "\u2e80" else 2):
                return None
            found.append(literal.lower())
    return found


class _Cue:
    """A cue pattern with a substring pre-check: most sentences hold none of its words, and
    `in` on a string is far cheaper than the regex (heuristic-v1 must stay under 20 ms)."""

    def __init__(self, *patterns: str) -> None:
        self.pattern = re.compile("|".join(patterns), re.IGNORECASE)
        words: list[str] = []
        self.always = False
        for pattern in patterns:
            literals = _literals(pattern)
            if literals is None:
                self.always = True
            else:
                words.extend(literals)
        self.words = tuple(dict.fromkeys(words))

    def search(self, text: str) -> re.Match[str] | None:
        if not self.always and not any(map(text.lower().__contains__, self.words)):
            return None
        return self.pattern.search(text)


def _cues(*patterns: str) -> _Cue:
    return _Cue(*patterns)


_DECISION = _cues(
    r"\b(?:chose|settled on|went with|opted)\b",
    r"\bwe(?:'ve| have)?\s+(?:finally\s+)?(?:agreed|picked)\b",
    r"\bdecided (?:to|on|that)\b",
    r"\bdecision\b",
    r"\bswitch(?:ed|ing)?\s+(?:\S+\s+){0,6}?to\b",
    r"\bmov(?:e|ed|ing)\s+(?:\S+\s+){0,3}?from\s+\S+(?:\s+\S+){0,4}?\s+to\b",
    r"\bmigrat(?:e|ed|ing)\s+(?:\S+\s+){0,6}?to\b",
    r"\breplac(?:e|ed|ing)\s+\S+(?:\s+\S+){0,4}?\s+with\b",
    r"\binstead of\b",
    r"\bgoing forward\b",
    r"\bwe(?:'ll| will| are going to) (?:use|keep|stay|pin|drop)\b",
    r"\bpinn?(?:ed|ing)?\s+\S+(?:\s+\S+){0,2}?\s+(?:to|at)\b",
    r"\bdrop(?:ped|ping)? (?:support for|the dependency)\b",
    r"决定|改用|换成|改成|改为|切换到|迁移到|迁到|弃用|放弃了|不再用|不用再|选用|采用|定为|统一用|就用|锁定",
)
_DEFERRED = _cues(
    r"\bnothing (?:was )?decided\b",
    r"\bnot (?:yet )?decided\b",
    r"\bneeds? (?:a |an )?(?:\w+ )?decision\b",
    r"\bdecide later\b",
    r"再决定|还没决定|没有决定|待定|先不动|先不改",
)
_RULE = _cues(
    r"\balways\b",
    r"\bnever\b",
    r"\bmust(?:n't| not)?\b",
    r"\bfrom now on\b",
    r"\bconvention\b",
    r"\bprefer(?:s|red)?\b",
    r"\bi'd rather\b",
    r"\bi would rather\b",
    r"\bdo not\b",
    r"\bdon't\b",
    r"以后|一律|总是|永远|始终|必须|禁止|不要|别再|约定|规范|偏好|优先用|喜欢用",
)
_LESSON = _cues(
    r"\broot cause\b",
    r"\bturned out\b",
    r"\bthe (?:fix|cause|problem|culprit) (?:is|was)\b",
    r"\blesson\b",
    r"\bgotcha\b",
    r"\bpitfall\b",
    r"\bbeware\b",
    r"\bwatch out\b",
    r"\bworkaround\b",
    r"\bcaused by\b",
    r"\bbreaks? (?:when|if|on)\b",
    r"根因|根本原因|原来是|原因是|教训|踩坑|坑|注意|绕过|解决办法|导致",
)
_REASON = _cues(
    r"\bbecause\b",
    r"\bsince\b",
    r"\bso that\b",
    r"\bdue to\b",
    r"\bwhich means\b",
    r"\bas it\b",
    r"\botherwise\b",
    r"因为|由于|所以|为了|以免|否则|因此",
)
_VERIFY = _cues(
    r"\btests? (?:now )?pass(?:ed|es)?\b",
    r"\ball (?:tests )?green\b",
    r"\b(?:passes|works) now\b",
    r"\bverified\b",
    r"\bconfirmed\b",
    r"\bmeasured\b",
    r"\bbenchmark(?:ed|s)?\b",
    r"\bp9[59]\b",
    r"\breproduced\b",
    r"测试通过|全部通过|跑通|验证|实测|确认|复现|压测",
)
_HEDGE = _cues(
    r"\bmaybe\b",
    r"\bmight\b",
    r"\bperhaps\b",
    r"\bprobably\b",
    r"\bnot sure\b",
    r"\bunsure\b",
    r"\bi think\b",
    r"\bi guess\b",
    r"\bcould try\b",
    r"\blet'?s try\b",
    r"\btodo\b",
    r"\btbd\b",
    r"\bunclear\b",
    r"\bhopefully\b",
    r"\bnot yet\b",
    r"也许|可能|大概|不确定|不知道|待定|再看|试试|或许|还没",
)
_TRIVIAL = _cues(
    r"\btypos?\b",
    r"\brenam(?:e|ed|ing)\b",
    r"\bwhitespace\b",
    r"\bformatting\b",
    r"\breformat",
    r"\bindentation\b",
    r"\bspelling\b",
    r"\bcomment wording\b",
    r"错别字|拼写|格式化|重命名|缩进",
)
_PREFERENCE = _cues(
    r"\bprefer", r"\bi'd rather\b", r"\bi would rather\b", r"\bi like\b", r"偏好|喜欢|习惯"
)
_AGAINST = _cues(r"\bnever\b", r"\bdo not\b", r"\bdon't\b", r"\bavoid\b", r"不要|禁止|别再|避免")
_STEP = re.compile(r"^\s*(?:\d+[.)]|步骤|第[一二三四五六七八九十]步)", re.MULTILINE)

_PATH = re.compile(
    r"(?<![\w/])(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:py|pyi|ts|tsx|js|mjs|rs|go|toml|json|ya?ml"
    r"|md|sql|sh|cfg|ini|lock|java|kt|c|h|cc|cpp|rb|php|swift|proto|css|html)\b"
)
_VERSION = re.compile(
    r"(?:(?<=[=@~^<>])|\bv)\d+\.\d+(?:\.\d+)*(?:[-.]?(?:rc|a|b|dev|post)\d*)?\b"
    r"|\b\d+\.\d+\.\d+(?:[-.]?(?:rc|a|b|dev|post)\d*)?\b"
)
_CODE = re.compile(r"`([^`\n]{2,80})`")
_ERROR_NAME = re.compile(r"\b[A-Z][A-Za-z]+(?:Error|Exception|Warning)\b|\bE\d{3,4}\b|\berrno\b")
_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
_HEADING = re.compile(r"^##\s+(.+?)\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+>]\s+|\d+[.)]\s+)")
_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")
_CJK_CHAR = re.compile(f"[{CJK}]")
_WORD = re.compile(rf"[A-Za-z][A-Za-z0-9_+#.-]{{3,}}|[{CJK}]{{2,}}")
_FROM = [
    re.compile(r"\bfrom\s+([\w.+#-]+(?:\s[\w.+#-]+)?)\s+to\b", re.IGNORECASE),
    re.compile(r"\binstead of\s+([\w.+#-]+(?:\s[\w.+#-]+)?)", re.IGNORECASE),
    re.compile(r"\breplac(?:e|ed|ing)\s+([\w.+#-]+(?:\s[\w.+#-]+)?)\s+with\b", re.IGNORECASE),
    re.compile(r"从\s*([\w.+#-]{2,20}?)\s*(?:改用|换成|改成|改为|切换到|迁移到|迁到)"),
    re.compile(r"(?:不再用|弃用|放弃了?)\s*([\w.+#-]{2,20})"),
]
_STOP = frozenset(
    re.findall(
        r"\w+",
        "this that with from have what when where which should would could there their about"
        " into then than them they will your just also been were does make more some only like",
    )
)


@dataclass
class _Sentence:
    text: str
    section: str
    decision: bool = False
    rule: bool = False
    lesson: bool = False
    question: bool = False
    trivial: bool = False
    reason: bool = False
    hedged: bool = False
    hooks: list[str] = field(default_factory=list)

    @property
    def evidence(self) -> bool:
        return not self.question and (self.decision or self.rule or self.lesson)

    @property
    def strength(self) -> float:
        return (
            3.0 * self.decision
            + 2.0 * self.rule
            + 1.5 * self.lesson
            + 1.0 * self.reason
            + 0.5 * min(2, len(self.hooks))
            - 2.0 * self.trivial
            - 1.0 * self.hedged
            - 1.0 * (self.section == "asked")  # a request, not yet what was done
        )


def _sections(text: str) -> list[tuple[str, str]]:
    """(heading in lower case, text) pairs; the part before the first heading is ''."""
    parts: list[tuple[str, list[str]]] = [("", [])]
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        heading = _HEADING.match(line)
        if heading:
            parts.append((heading.group(1).strip().lower(), []))
        else:
            parts[-1][1].append(line)
    return [(name, "\n".join(lines)) for name, lines in parts]


def _split_sentences(text: str) -> list[str]:
    found: list[str] = []
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        for piece in _SPLIT.split(line):
            piece = piece.strip().strip("\"'")
            if len(piece) >= (4 if _CJK_CHAR.search(piece) else 12):
                found.append(piece[:MAX_QUOTE_CHARS])
    return found


def _hooks(text: str, names: Sequence[str]) -> list[str]:
    """The names (linked entities, and the paths, versions, code and errors found in the
    sentence's section) that `text` contains."""
    low = text.casefold()
    return [name for name in names if name and name.casefold() in low]


def _terms(text: str) -> set[str]:
    terms: set[str] = set()
    for word in _WORD.findall(text):
        if _CJK_CHAR.match(word):
            terms.update(word[i : i + 2] for i in range(len(word) - 1))
        elif word.lower() not in _STOP:
            terms.add(word.lower())
    return terms


def _read(session: SessionText) -> tuple[list[_Sentence], dict[str, int]]:
    sentences: list[_Sentence] = []
    counts = {"paths": 0, "versions": 0, "code": 0, "errors": 0, "dates": 0, "steps": 0}
    seen: set[str] = set()
    for name, text in _sections(session.text):
        if name in SKIPPED_SECTIONS:
            continue
        found = {
            "paths": set(_PATH.findall(text)),
            "versions": set(_VERSION.findall(text)),
            "code": set(_CODE.findall(text)),
            "errors": set(_ERROR_NAME.findall(text)),
        }
        for key, values in found.items():
            counts[key] += len(values)
        counts["dates"] += len(set(_DATE.findall(text)))
        counts["steps"] += len(_STEP.findall(text))
        if name in HOOK_SECTIONS or (not name and text.lstrip().startswith("**")):
            continue  # the capture header line: agent, times, counts
        names = [*session.entities, *(v for values in found.values() for v in sorted(values))]
        for sentence in _split_sentences(text):
            key = " ".join(sentence.casefold().split())
            if key in seen:
                continue
            seen.add(key)
            read = _Sentence(
                text=sentence,
                section=name,
                decision=bool(_DECISION.search(sentence)) and not _DEFERRED.search(sentence),
                rule=bool(_RULE.search(sentence)),
                lesson=bool(_LESSON.search(sentence)),
                question=sentence.rstrip().endswith(("?", "？")),
            )
            if read.evidence:  # the rest only matters for evidence
                read.trivial = bool(_TRIVIAL.search(sentence))
                read.reason = bool(_REASON.search(sentence))
                read.hedged = bool(_HEDGE.search(sentence))
                read.hooks = _hooks(sentence, names)
            sentences.append(read)
    return sentences, counts


def _unanswered(sentences: list[_Sentence]) -> list[_Sentence]:
    """Questions no later sentence answers (shares two of its words)."""
    if not any(s.question for s in sentences):
        return []
    terms = [_terms(s.text) for s in sentences]  # once each: questions x sentences
    left: list[_Sentence] = []
    for i, sentence in enumerate(sentences):
        asked = terms[i]
        if not sentence.question or len(asked) < 2:
            continue
        later = (terms[j] for j in range(i + 1, len(sentences)) if not sentences[j].question)
        if not any(len(asked & words) >= 2 for words in later):
            left.append(sentence)
    return left


def _clamp(value: float) -> float:
    return round(min(1.0, max(0.0, value)), 2)


def _title(sentence: str) -> str:
    text = sentence.strip().rstrip("。.!！;；:：")
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[: TITLE_CHARS - 1]
    space = cut.rfind(" ")
    if space > TITLE_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip(" ,，、") + "…"


def _superseded(evidence: Sequence[_Sentence], candidates: Sequence[Candidate]) -> list[str]:
    left: set[str] = set()
    for sentence in evidence:
        for pattern in _FROM:
            for match in pattern.finditer(sentence.text):
                left.add(match.group(1).strip().casefold())
    return [c.slug for c in candidates if any(old in c.title.casefold() for old in left if old)]


def score_heuristic(
    session: SessionText, candidates: Sequence[Candidate] = ()
) -> PromotionProposal:
    """heuristic-v1 (the module docstring lists its rules): scores and a proposal built only
    from sentences and words of the session."""
    sentences, counts = _read(session)
    evidence = [s for s in sentences if s.evidence]
    decisions = sum(s.decision for s in evidence)
    rules = sum(s.rule for s in evidence)
    lessons = sum(s.lesson for s in evidence)
    all_trivial = bool(evidence) and all(s.trivial for s in evidence)
    hooked = any(s.hooks for s in evidence)
    reasoned = any(s.reason for s in evidence)
    unanswered = _unanswered(sentences)
    verified = sum(bool(_VERIFY.search(s.text)) for s in sentences)
    hedged = sum(s.hedged for s in evidence)
    entities = [e for e in session.entities if e]

    d = (
        0.22 * min(decisions, 3)
        + 0.15 * min(rules, 2)
        + 0.12 * min(lessons, 2)
        + 0.15 * reasoned
        + 0.1 * hooked
    )
    u = (
        0.15 + 0.3 * (rules > 0) + 0.2 * (lessons > 0) + 0.2 * hooked + 0.1 * min(decisions, 2)
        if evidence
        else 0.1
    )
    if all_trivial:
        d, u = d / 2, u / 2
    r = (
        0.12 * min(len(entities), 4)
        + 0.1 * min(counts["paths"], 3)
        + 0.12 * min(counts["versions"], 2)
        + 0.06 * min(counts["code"], 3)
        + 0.1 * min(counts["errors"], 2)
        + 0.05 * (counts["dates"] > 0)
    )
    a = 0.6 + 0.1 * min(verified, 3) - 0.12 * min(hedged, 3) - 0.1 * min(len(unanswered), 3)
    dura = Dura(D=_clamp(d), U=_clamp(u), R=_clamp(r), A=_clamp(a), by=HEURISTIC)

    ranked = sorted(evidence, key=lambda s: s.strength, reverse=True)
    quoted = [s.text for s in ranked[:MAX_EVIDENCE]]
    best = ranked[0].text if ranked else session.title
    proposed_type = _type_of(ranked, counts["steps"], decisions)
    triggers: dict[str, None] = {}
    for sentence in ranked[:MAX_EVIDENCE]:
        for hook in sentence.hooks:
            if len(hook) <= 60:
                triggers.setdefault(hook, None)
    body = "\n".join(f"- {q}" for q in quoted) or session.title
    reasoning = (
        f"{HEURISTIC}: {decisions} decision, {rules} rule and {lessons} lesson sentence(s)"
        f"{' (one gives its reason)' if reasoned else ''}"
        f"{', all trivial' if all_trivial else ''}; hooks: {len(entities)} linked entities,"
        f" {counts['paths']} paths, {counts['versions']} versions, {counts['code']} code spans,"
        f" {counts['errors']} error names; {verified} verification cue(s),"
        f" {hedged} hedged evidence sentence(s), {len(unanswered)} unanswered question(s)"
    )
    return PromotionProposal(
        source_slug=session.slug,
        source_title=session.title,
        source_fingerprint=session.fingerprint,
        scope_hash=session.scope_hash,
        proposed_type=proposed_type,
        proposed_title=_title(best),
        proposed_body=body,
        proposed_triggers=list(triggers)[:MAX_TRIGGERS],
        proposed_supersedes=_superseded(evidence, candidates),
        dura=dura,
        reasoning=reasoning,
        evidence=quoted,
    )


def _type_of(ranked: Sequence[_Sentence], steps: int, decisions: int) -> MemoryType:
    if not ranked:
        return MemoryType.FACT
    top = ranked[:3]
    if any(_PREFERENCE.search(s.text) for s in top):
        return MemoryType.PREFERENCE
    if ranked[0].lesson and _AGAINST.search(ranked[0].text):
        return MemoryType.WARNING
    if steps >= 3:
        return MemoryType.PLAYBOOK
    if decisions:
        return MemoryType.DECISION
    if any(s.lesson for s in top):
        return MemoryType.WARNING
    return MemoryType.FACT


# --------------------------------------------------------------------------- the LLM


def score_with_llm(
    llm: LLMProvider, session: SessionText, candidates: Sequence[Candidate] = ()
) -> PromotionProposal:
    """Score with the provider's structured output (raises ExtractionFailed and friends on
    failure: the caller leaves the memory queued). Evidence the model quotes is kept only
    when it is in the session verbatim; supersedes only among the `candidates` offered."""
    from memoryd.llm.extract import score_dura

    judgement = score_dura(
        llm,
        f"{session.title}\n\n{session.text}",
        existing=[(c.slug, c.title) for c in candidates],
    )
    flat = " ".join(session.text.split())
    evidence = [q.strip() for q in judgement.evidence if q.strip() and " ".join(q.split()) in flat][
        :MAX_EVIDENCE
    ]
    offered = {c.slug for c in candidates}
    return PromotionProposal(
        source_slug=session.slug,
        source_title=session.title,
        source_fingerprint=session.fingerprint,
        scope_hash=session.scope_hash,
        proposed_type=judgement.memory_type,
        proposed_title=judgement.proposed_title.strip()[:200],
        proposed_body=judgement.proposed_body.strip() or judgement.proposed_title.strip(),
        proposed_triggers=judgement.proposed_triggers[:MAX_TRIGGERS],
        proposed_supersedes=[s for s in judgement.proposed_supersedes if s in offered],
        dura=Dura(
            D=judgement.D, U=judgement.U, R=judgement.R, A=judgement.A, by=f"llm:{llm.model}"
        ),
        reasoning=judgement.reasoning,
        evidence=evidence,
    )


# --------------------------------------------------------------------------- one session


@dataclass(frozen=True)
class AnalysisJob:
    """`analyze-session` prepared from the file (a read): what to score and how. The LLM
    call (`run_analysis`) touches no store, so the daemon runs it off its writer thread."""

    slug: str
    fingerprint: str
    session: SessionText
    candidates: tuple[Candidate, ...]
    use_llm: bool
    heuristic: PromotionProposal


def run_analysis(llm: LLMProvider | None, job: AnalysisJob) -> PromotionProposal | MemorydError:
    """The proposal, or the LLM's error (returned: the caller queues the memory again)."""
    if not job.use_llm or llm is None:
        return job.heuristic
    try:
        return score_with_llm(llm, job.session, job.candidates)
    except MemorydError as exc:
        logger.warning("DURA scoring of %s with %s failed: %s", job.slug, llm.model, exc.code)
        return exc


def retry_later(
    store: GovernanceStore,
    job: AnalysisJob,
    error: MemorydError,
    *,
    max_attempts: int,
    backoff: Callable[[int], float],
) -> MemorydError:
    """After a failed LLM score: queue the memory for the daemon's enrichment worker with
    backoff, exactly as a failed enrichment is (`attempts` grows, `failed` at the last), and
    return the error to raise, saying so."""
    now = utcnow()
    row = store.enrichment(job.slug)
    if row is None or row.fingerprint != job.fingerprint:
        store.enqueue_enrichment(job.slug, job.fingerprint, now)
        row = store.enrichment(job.slug)
    assert row is not None
    attempts = row.attempts + 1
    failed = attempts >= max_attempts
    wait = backoff(attempts)
    store.record_enrichment(
        job.slug,
        job.fingerprint,
        state="failed" if failed else "pending",
        rules_done=row.rules_done,
        attempts=attempts,
        last_error=f"{error.code}: {error.message}",
        next_attempt_at=now + timedelta(seconds=wait),
        now=now,
    )
    later = (
        f"it failed {attempts} times and is not retried (captured again, it is)"
        if failed
        else f"it stays queued and the daemon retries it in {wait:.0f} s"
        f" (attempt {attempts} of {max_attempts})"
    )
    return type(error)(
        f"DURA scoring of {job.slug} with the LLM failed: {error.message}; {later}",
        hint="check the [llm] settings, or score offline now with --heuristic",
    )
