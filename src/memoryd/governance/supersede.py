"""Supersede judging: does a new memory replace an older one about the same thing?

DESIGN.md §7 and seeds/002 §5. When a long-term memory is written or a session is enriched,
the older preference, decision and fact memories of its scope that share an entity with it
are judged. Deterministic rules go first: explicit replacement wording ("switch from A to B",
"replace A with B", "B instead of A", "no longer A", "从 A 切到 B", "改用 B", "不再用 A")
against an older memory that asserts A, and single-valued choices (one database, framework or
package manager per role). The LLM judge (`llm.extract.judge_supersedes`) takes what the
rules cannot decide. The confidence picks the tier: automatic, a candidate for a human, or
nothing. Every verdict names what made it (`rule:<name>` or `llm:<model>`).

The rules work on text alone, so `bench/supersede.py` measures them on the labelled pairs
in tests/data/supersede/ exactly as the service runs them.

Over 600 lines: the English and Chinese replacement rules and their lexicon checks read
best side by side with the tiers they feed.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cache
from typing import Any, Literal

from memoryd.errors import Conflict, MemorydError, NotFound
from memoryd.graph.store import GraphStore, SupersedeRow
from memoryd.llm.base import LLMProvider
from memoryd.models import Memory, SupersedeDecision, SupersedeStatus

# Confidences the rules give. Explicit replacement wording about the older memory's own
# value is near-certain; a change of value without replacement words, or one limited to a
# part the older memory does not name, is for a human to confirm (the prompt's calibration).
EXPLICIT = 0.95
NO_LONGER = 0.9
WENT_BACK = 0.9
SWITCH_TO_SAME_KIND = 0.88
PARTIAL = 0.6
SINGLE_VALUED = 0.65
FAN_OUT = 0.7
"""One of many older memories a newer one would replace at once: a candidate."""
STATUS = 0.99
"""A status line of one record names the other ("Superseded by ADR-0036")."""
STATUS_JUDGE = "rule:status-line"
RULES_VERSION = 2
"""The version of the rules that made an automatic decision, kept with it: a data dir whose
automatic decisions an older version made gets them judged again on open. 1 (unrecorded):
any word after "no longer" / "instead of" was a replaced thing; 2: only a known name, an
explicit status line, at most `MAX_AUTOMATIC` at once."""
HEDGED = 0.35
"""A transition that is only considered, planned or asked about: the newer memory does not
present it as the current state."""

CHOICE_TYPES = frozenset({"tool", "library", "concept"})
"""Entity types that can be a replaced choice (a tool, library, service, protocol); concepts
come only from the curated lexicon (protocols) or, from the graph, never."""

GRAPH_CHOICE_TYPES = frozenset({"tool", "library"})
"""Types of graph entities a rule may take as the replaced thing besides the lexicon's."""

SINGLE_VALUED_KINDS = frozenset(
    {
        "database",
        "framework",
        "runtime",
        "cloud",
        "ci",
        "package-manager",
        "bundler",
        "test-runner",
        "e2e-testing",
        "build-tool",
    }
)
"""Lexicon kinds of which a role has one current choice (a package manager, a framework, the
CI system). Linters, formatters and other development tools run side by side: a project that
adds Playwright keeps pnpm."""


@dataclass(frozen=True)
class Verdict:
    """One judgement: how likely the newer memory replaces the older, and why."""

    confidence: float
    reason: str
    judge: str
    """`rule:<name>` or `llm:<provider>/<model>`."""
    old: str | None = None
    """The value the older memory asserted that is no longer current, when the rule knows."""


@dataclass(frozen=True)
class Tiers:
    """What a confidence does (config `[supersede]`)."""

    auto: float = 0.85
    candidate: float = 0.5

    def status(self, confidence: float) -> SupersedeStatus | None:
        if confidence >= self.auto:
            return SupersedeStatus.ACTIVE
        if confidence >= self.candidate:
            return SupersedeStatus.CANDIDATE
        return None

    def tier(self, confidence: float) -> str:
        status = self.status(confidence)
        return "ignored" if status is None else ("auto" if status == "active" else "candidate")


# --------------------------------------------------------------------------- names


@dataclass(frozen=True)
class Name:
    """A tool, library or other named thing, with the surfaces it is written as."""

    name: str
    surfaces: tuple[str, ...]
    kind: str = ""

    @property
    def pattern(self) -> re.Pattern[str]:
        return _surface_pattern(self.surfaces)


@cache
def _surface_pattern(surfaces: tuple[str, ...]) -> re.Pattern[str]:
    alts = "|".join(re.escape(s) for s in sorted(surfaces, key=len, reverse=True))
    return re.compile(rf"(?<![\w.@/-])(?:{alts})(?![\w-]|\.\w)", re.IGNORECASE)


@cache
def _lexicon() -> dict[str, Name]:
    """Casefolded surface → Name, over the shipped lexicon's tools, frameworks and databases."""
    from memoryd.extraction.pipeline import load_lexicon

    found: dict[str, Name] = {}
    for entry in load_lexicon():
        if not entry.kind and entry.source != "curated":
            continue  # package-registry names: too many are ordinary words
        if entry.type.value not in CHOICE_TYPES:
            continue  # a company, a person or a place is not a choice a record replaces
        name = Name(entry.name, (entry.name, *entry.aliases), entry.kind)
        for surface in name.surfaces:
            found.setdefault(surface.casefold(), name)
    return found


@cache
def _case_sensitive() -> frozenset[str]:
    """Surfaces that are names only as written ("Go", "Swift"; not "go", "swift")."""
    from memoryd.extraction.pipeline import load_lexicon

    return frozenset(s for entry in load_lexicon() for s in entry.case_sensitive)


@cache
def _case_sensitive_folded() -> frozenset[str]:
    return frozenset(s.casefold() for s in _case_sensitive())


def _is_name(surface: str) -> bool:
    return surface.casefold() not in _case_sensitive_folded() or surface in _case_sensitive()


@cache
def _lexicon_pattern() -> re.Pattern[str]:
    surfaces = sorted(_lexicon(), key=len, reverse=True)
    alts = "|".join(re.escape(s) for s in surfaces)
    return re.compile(rf"(?<![\w.@/-])(?:{alts})(?![\w-]|\.\w)", re.IGNORECASE)


_CJK = re.compile(r"[\u4e00-\u9fff]")


def names_in(
    text: str, known: Sequence[Name] = (), *, chinese: bool | None = None
) -> list[tuple[int, Name]]:
    """Known names in the text with their offsets, in order: the lexicon's, and `known`
    (entities of the graph both memories mention)."""
    lex = _lexicon()
    # Case tells "Black" the formatter from "black" the colour in English; in Chinese text a
    # Latin word is a name however it is written ("格式化工具用 black").
    if chinese is None:
        chinese = _CJK.search(text) is not None
    found = [
        (m.start(), lex[m.group(0).casefold()])
        for m in _lexicon_pattern().finditer(text)
        if chinese or _is_name(m.group(0))
    ]
    for name in known:
        if name.surfaces[0].casefold() in lex:
            continue
        found += [(m.start(), name) for m in name.pattern.finditer(text)]
    return sorted(found, key=lambda item: item[0])


def name_of(
    slot: str, known: Sequence[Name] = (), *, within: int = 12, context: str = "", code: bool = True
) -> Name | None:
    """The thing a captured slot names: a lexicon name or a known entity at its start
    (within `within` characters), else a code-like name opening it (`code_name`). Any
    other word ("be", "to", "need", a person) names nothing a memory could replace.
    `context`: the sentence the slot is from; `code`: whether a code-like name counts."""
    slot = slot.strip().removeprefix("the ").removeprefix("The ").strip()
    found = names_in(slot[:60], known, chinese=_CJK.search(context or slot) is not None)
    if found and found[0][0] <= within:
        return found[0][1]
    return code_name(_FILLER.sub("", slot)) if code else None


_CODE_TOKEN = re.compile(
    r"`(?P<tick>[A-Za-z][\w.+#-]{1,39})`|(?P<word>[A-Za-z][\w.+#-]{1,39})(?![/\w])"
)
_CODE_SHAPE = re.compile(
    r"^(?:[a-z]+[A-Z][A-Za-z]*|[A-Z][a-z]+[A-Z][A-Za-z]*|[A-Za-z]+\.(?:js|ts|py|rs|go|io|net)"
    r"|[A-Za-z]+\d+[A-Za-z\d]*)$"
)
"""Names written as code: camel case (MobX, GraphQL), a language extension (Chart.js), letters
with digits (log4j)."""
_INFLECTION = re.compile(r"(?:ies|es|s|ed|ing|er|ers|ly)$")


def code_name(slot: str) -> Name | None:
    """The code-like name opening a slot when memoryd does not know it: in backticks, shaped
    as code (`_CODE_SHAPE`), or a word that is no English word, first name or inflection of
    one ("gofmt", "argparse"). Function words, verbs and people never are."""
    m = _CODE_TOKEN.match(slot.strip())
    if m is None:
        return None
    if m.group("tick"):
        text = m.group("tick").strip("()")
    else:
        text = m.group("word").rstrip(".-")
        if not (_CODE_SHAPE.match(text) or _not_a_word(text)):
            return None
    if len(text) < 3 or not re.search(r"[A-Za-z]", text):
        return None
    return Name(text, (text,), CODE_KIND)


CODE_KIND = "code"
"""The kind of a name memoryd knows only by its shape (`code_name`, `word_name`)."""
_VALUE_BEFORE = re.compile(
    r"\b(?:on|with|is|are|was|were|use|uses|used|using|via|chose|chosen|picked|prefer|"
    r"prefers|adopted|decided on)\s+(?:the\s+|plain\s+|`)?$",
    re.IGNORECASE,
)


def states_value(text: str, name: Name) -> bool:
    """The text states `name` as the value of a choice ("decided on MobX", "the client is
    requests", "built with argparse"), not as a word in passing ("manual codebase
    searching"): what a name known only by its shape needs in the older memory."""
    return any(
        _VALUE_BEFORE.search(text[max(0, m.start() - 30) : m.start()])
        for m in name.pattern.finditer(text)
    )


def _not_a_word(text: str) -> bool:
    """A lower-case word of three letters or more that no English word list holds, however
    it is inflected, and no first name: a tool's name (`gofmt`), not prose."""
    from memoryd.extraction.pipeline import load_first_names

    if not re.fullmatch(r"[a-z][a-z0-9-]{3,30}", text):
        return False
    words = _english()
    stems = {text, _INFLECTION.sub("", text), re.sub(r"(?:es|s|ed|d)$", "", text)}
    stems |= {s + "e" for s in tuple(stems)}
    if stems & words or any(part in words for part in text.split("-")):
        return False
    return text.capitalize() not in load_first_names()


@cache
def _english() -> frozenset[str]:
    from memoryd.extraction.pipeline import load_everyday_nouns
    from memoryd.extraction.wordlists import load_common_words

    return load_common_words() | load_everyday_nouns()


def word_name(slot: str) -> Name | None:
    """The rarer word opening the replaced side of "use httpx instead of requests", taken
    as a name only when the other side is one: a lower-case word of four letters or more
    outside the commonest English words (`RARE_FROM` on)."""
    from memoryd.extraction.wordlists import load_common_words_ranked

    m = re.match(r"\s*([a-z][a-z0-9]{3,30})(?![/\w-])", _FILLER.sub("", slot))
    if m is None:
        return None
    rank = load_common_words_ranked().get(m.group(1))
    if rank is not None and rank < RARE_FROM:
        return None
    return Name(m.group(1), (m.group(1),), CODE_KIND)


RARE_FROM = 2000
"""Words ranked below this in `common_words.txt` (ordered by frequency) are never names."""


_NEW_END = re.compile(
    r"\s+(?:for|in|on|at|because|since|as|so|to|and|but|which|that|when|after|before|"
    r"across|with|via|from|now)\b|[,;:!?()\[\]，。；：！？、（）]|\.(?!\w)|的|来|做|作为|因为|后|了",
    re.IGNORECASE,
)
_NEW_WORD = re.compile(r"[A-Za-z][\w.+#-]*(?:\s+[A-Z][\w.+#-]*){0,2}|[\u4e00-\u9fff]{2,6}")


def new_of(slot: str, known: Sequence[Name] = (), *, context: str = "") -> Name | None:
    """What a change moves to: a known name, else the first words of the slot. Only the
    new side may be a name memoryd does not know ("replaced Celery with Dramatiq"): the
    replaced side is what an older memory is matched on, and must be a known name."""
    found = name_of(slot, known, context=context)
    if found is not None:
        return found
    slot = slot.strip().removeprefix("the ").removeprefix("The ").strip()
    cut = _NEW_END.search(slot)
    word = _NEW_WORD.match((slot[: cut.start()] if cut else slot).strip())
    if word is None:
        return None
    text = word.group(0).strip()
    return Name(text, (text,))


# --------------------------------------------------------------------------- patterns

_N = r"(?:[^,.;:!?\n，。；：！？]|\.(?=\w)){1,60}?"
_NZ = r"[^,.;:!?\n，。；：！？]{1,40}?"
_NG = r"(?:[^,.;:!?\n，。；：！？]|\.(?=\w)){1,60}"
"""A greedy slot for the new value: its name is read from its start (`name_of`)."""


@dataclass(frozen=True)
class Transition:
    """A change the newer memory states: `old` is no longer used (for its role), `new` is."""

    rule: str
    old: Name | None
    new: Name | None
    sentence: str
    subject: frozenset[str] = frozenset()
    """What was changed, when the sentence names it before the change (`switch-to`)."""


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_FROM_TO = [
    (
        "switch-from-to",
        _rx(
            r"\b(?:switch|migrat|mov|port|transition|chang|convert|shift|go|went|upgrad|rewr|"
            r"rewrote|downgrad)\w*\b"
            rf"[^.;\n]{{0,40}}?\bfrom\s+(?P<old>{_N})\s+(?:to|over to|onto|into)\s+(?P<new>{_NG})"
            r"(?=$|[\s,.;:!?)])"
        ),
    ),
    (
        "replace-with",
        _rx(
            rf"\breplac(?:e|ed|es|ing)\s+(?P<old>{_N})\s+(?:with|by)\s+(?P<new>{_NG})"
            r"(?=$|[\s,.;:!?)])"
        ),
    ),
    (
        "replaced-by",
        _rx(
            rf"(?P<old>{_N})\s+(?:was|were|is|are|has been|have been|got|gets)\s+replaced\s+"
            rf"(?:with|by)\s+(?P<new>{_NG})(?=$|[\s,.;:!?)])"
        ),
    ),
    (
        "drop-for",
        _rx(
            r"\b(?:drop(?:ped|ping|s)?|ditch(?:ed|ing)?|abandon(?:ed|ing)?|deprecat(?:e|ed|ing)|"
            rf"remov(?:e|ed|ing)|retir(?:e|ed|ing))\s+(?P<old>{_N})\s+"
            rf"(?:in favou?r of|for)\s+(?P<new>{_NG})(?=$|[\s,.;:!?)])"
        ),
    ),
    (
        "zh-from-to",
        _rx(
            rf"从\s*(?P<old>{_NZ})\s*(?:切换?到|切换成|换成|换到|换为|迁移到|迁移至|迁到|转到|"
            rf"转向|转为|改成|改为|改用|升级到|过渡到|替换为|替换成)\s*(?P<new>{_NZ})"
            r"(?=$|[\s,.;:!?，。；：！？了的来做])"
        ),
    ),
    (
        "zh-use-to-replace",
        _rx(
            rf"(?:用|以|拿)\s*(?P<new>{_NZ})\s*(?:替换|替代|取代|代替)(?:了|掉)?\s*(?P<old>{_NZ})"
            r"(?=$|[\s,.;:!?，。；：！？])"
        ),
    ),
    (
        "zh-replaced-by",
        _rx(rf"(?P<old>{_NZ})\s*(?:已经|已)?被\s*(?P<new>{_NZ})\s*(?:替换|替代|取代|代替)"),
    ),
]
_INSTEAD = [
    (
        "instead-of",
        _rx(rf"\b(?:instead of|rather than|in place of)\s+(?P<old>{_NG})(?=$|[\s,.;:!?)])"),
    ),
    (
        "zh-instead-of",
        _rx(rf"(?:而不是|而非|取代了?|代替了?)\s*(?P<old>{_NZ})(?=$|[\s,.;:!?，。；：！？])"),
    ),
]
_NO_LONGER = [
    (
        "no-longer",
        _rx(
            r"\b(?:no longer|not\s+(?:using|use)\s+\S+\s+any\s?more|stopped|stop|don't|do not|"
            r"won't|will not)\s+(?:use|using|run|running|rely on|relying on|need|depend on)\s+"
            rf"(?P<old>{_NG})(?=$|[\s,.;:!?)])"
        ),
    ),
    (
        "zh-no-longer",
        _rx(
            rf"(?:不再用|不再使用|不再依赖|不用|弃用|停用|废弃|去掉|移除)了?\s*(?P<old>{_NZ})(?=$|[\s,.;:!?，。；：！？了])"
        ),
    ),
]
_SWITCH_TO = [
    (
        "switch-to",
        _rx(
            r"\b(?:switched|migrated|moved|changed|standardi[sz]ed|converted|are switching|"
            r"have switched|have moved|have migrated|will switch|will migrate|will move)\s+"
            r"(?:\w+\s+){0,4}?(?:to|on|onto|over to)\s+"
            rf"(?P<new>{_NG})(?=$|[\s,.;:!?)])"
        ),
    ),
    (
        "zh-switch-to",
        _rx(
            rf"(?:改用|换成|换用|切到|切换到|迁移到|迁到|转用|改成)\s*(?P<new>{_NZ})(?=$|[\s,.;:!?，。；：！？了的来做])"
        ),
    ),
]
_WENT_BACK = _rx(
    r"(?:\b(?:went back|go back|going back|switched back|moved back|reverted|rolled back|"
    rf"returned)\s+to\s+|回到|换回|切回|退回到?|回退到?|改回)\s*(?P<new>{_NG})(?=$|[\s,.;:!?，。；：！？了)])"
)
_TRIED = _rx(
    r"(?:\b(?:tried|trialled|experimented with|evaluated|tested)\s+|试了|试过|尝试了?)"
    rf"\s*(?P<old>{_NG})(?=$|[\s,.;:!?，。；：！？了)])"
)
_HEDGE = _rx(
    r"\b(?:consider(?:ing|ed)?|thinking (?:of|about)|maybe|might|could|should we|propos(?:e|al|ed)|"
    r"evaluat(?:e|ing)|whether|plan(?:ning)? to|would|wants? to|if we|someday|eventually|"
    r"suggest(?:ed|s)?|other teams?|another team)\b|\?|？|"
    r"考虑|是否|要不要|也许|可能|如果|打算|计划|评估|建议|想要|其他团队|别的团队"
)
_PARTIAL = _rx(
    r"\b(?:only|just)\s+(?:for\s+)?(?:the\s+)?|(?:仅|只有|只在|只是|仅在|仅限)|"
    r"\b(?:rest|others?|everything else|other services)\b[^.]{0,40}\b(?:stay|stays|keep|remain)|"
    r"其他[^。]{0,20}(?:不变|还是|仍然|继续)"
)
_COMPONENT = _rx(
    r"\b([a-z][\w-]{1,30})\s+(?:service|worker|api|app|dashboard|pipeline|job|cluster|module|"
    r"microservice|frontend|backend|site|cli)\b|([\u4e00-\u9fffA-Za-z][\w\u4e00-\u9fff-]{0,10}?)"
    r"(?:服务|模块|子系统|后台|前端|后端)"
)
_COMPONENT_STOP = frozenset(
    {
        "the",
        "a",
        "an",
        "our",
        "this",
        "that",
        "every",
        "all",
        "each",
        "new",
        "old",
        "whole",
        "web",
        "main",
        "its",
        "their",
        "one",
        "any",
        "所有",
        "全部",
        "整个",
        "这个",
        "那个",
        "的",
        "各",
    }
)
_SENTENCE = re.compile(r"(?:[^.!?\n。！？；;]|\.(?=\S))+[.!?。！？；;]?")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def components(text: str) -> set[str]:
    """Parts of a system a sentence names ("the billing service", "支付服务")."""
    found: set[str] = set()
    for m in _COMPONENT.finditer(text):
        word = (m.group(1) or m.group(2) or "").casefold()
        if word and word not in _COMPONENT_STOP:
            found.add(word)
    return found


_FILLER = _rx(r"^\s*(?:(?:the|our|plain|any|all|using|use|to use|of)\s+)+")
_VERSION = re.compile(r"([A-Za-z][\w.+#-]*)\s*v?(\d+(?:\.\d+)*)")
_SUBJECT_STOP = frozenset(
    {
        "have",
        "has",
        "been",
        "were",
        "that",
        "this",
        "they",
        "then",
        "just",
        "also",
        "team",
        "decided",
        "decision",
        "finally",
        "today",
        "last",
        "week",
        "sprint",
        "决定",
        "我们",
        "现在",
        "已经",
        "最后",
        "今天",
    }
)


def _versioned(slot: str) -> Name | None:
    """`Python 3.9` and `Python 3.12` are different values of one thing."""
    m = _VERSION.search(slot)
    if m is None:
        return None
    text = f"{m.group(1)} {m.group(2)}"
    return Name(text, (text,))


def subject_before(sentence: str, start: int) -> set[str]:
    """Content words before a change in its sentence: what was changed ("the docs site",
    "状态管理"), to recognise the same role in an older memory."""
    head = sentence[:start]
    words = {w.casefold() for w in re.findall(r"[A-Za-z][\w-]{3,}", head)}
    words |= set(re.findall(r"[\u4e00-\u9fff]{2,4}", head))
    return words - _SUBJECT_STOP


def transitions(text: str, known: Sequence[Name] = ()) -> list[Transition]:
    """The changes of choice a text states, sentence by sentence: in each, the first kind of
    wording that applies (a return, both sides named, one side named). Each side is a name
    the lexicon or `known` holds; wording about anything else states no change of choice."""
    out: list[Transition] = []
    for sentence in _sentences(text):
        for reader in (_went_back, _from_to, _instead_of, _no_longer, _switch_to):
            found = reader(sentence, known)
            if found:
                out.extend(found)
                break
    return out


def _went_back(sentence: str, known: Sequence[Name]) -> list[Transition]:
    back = _WENT_BACK.search(sentence)
    if back is None:
        return []
    tried = _TRIED.search(sentence)
    old = name_of(tried.group("old"), known, context=sentence) if tried else None
    new = new_of(back.group("new"), known, context=sentence)
    return [Transition("went-back", old, new, sentence)]


def _from_to(sentence: str, known: Sequence[Name]) -> list[Transition]:
    out: list[Transition] = []
    for rule, rx in _FROM_TO:
        for m in rx.finditer(sentence):
            old = name_of(m.group("old"), known, context=sentence)
            new = new_of(m.group("new"), known, context=sentence)
            if old is None and name_of(m.group("new"), known, context=sentence) is not None:
                old = word_name(m.group("old"))  # "from requests to httpx": both sides named
            if old is not None and new is not None and old.name == new.name:
                old, new = _versioned(m.group("old")), _versioned(m.group("new"))
            if old is not None and new is not None and old.name != new.name:
                out.append(Transition(rule, old, new, sentence))
    return out


_CLAUSE_BREAK = re.compile(r"\s[-–—]\s|[;:；：]|\bbut\b|但是?")


def _instead_of(sentence: str, known: Sequence[Name]) -> list[Transition]:
    for rule, rx in _INSTEAD:
        m = rx.search(sentence)
        if m is not None:
            old = name_of(m.group("old"), known, context=sentence)
            # The replacement is named in the same clause: in "doesn't need ElasticSearch
            # often - rather than use Kibana, the team uses kubectl" it is not ElasticSearch.
            clause = _CLAUSE_BREAK.split(sentence[: m.start()])[-1]
            before = [n for _, n in names_in(clause, known)]
            # A name memoryd does not know counts right before the contrast: "use httpx
            # instead of requests", not a word anywhere in a long clause.
            before = before or [
                n for w in re.split(r"\s+", clause.rstrip())[-3:] if (n := code_name(w)) is not None
            ]
            new = before[-1] if before else None
            if old is None and new is not None:
                old = word_name(m.group("old"))  # "use httpx instead of requests"
            # "rather than use Kibana, the team mostly uses `kubectl logs`": a contrast that
            # names no replacement in its clause describes a practice, not a change.
            if old is not None and new is not None and new.name != old.name:
                return [Transition(rule, old, new, sentence)]
    return []


def _no_longer(sentence: str, known: Sequence[Name]) -> list[Transition]:
    for rule, rx in _NO_LONGER:
        m = rx.search(sentence)
        if m is not None:
            # What is no longer used is the verb's object: "don't support the AWS agent"
            # is not "no longer uses AWS".
            old = name_of(_FILLER.sub("", m.group("old")), known, within=0, context=sentence)
            if old is not None:
                return [Transition(rule, old, None, sentence)]
    return []


def _switch_to(sentence: str, known: Sequence[Name]) -> list[Transition]:
    for rule, rx in _SWITCH_TO:
        m = rx.search(sentence)
        if m is not None:
            # One side only: the name must be one memoryd knows (its kind finds the old one).
            new = name_of(m.group("new"), known, context=sentence, code=False)
            if new is not None:
                subject = frozenset(subject_before(sentence, m.start()))
                return [Transition(rule, None, new, sentence, subject)]
    return []


# --------------------------------------------------------------------------- assertions

_NEGATED_BEFORE = _rx(
    r"(?:no longer|not|never|don't|do not|stopped|stop|instead of|rather than|from|replace|"
    r"replaced|drop|dropped|ditch|ditched|tried|不再用?|不用|弃用|停用|从|而不是|替换|取代|试了|试过)"
    r"\s*(?:use|using)?\s*(?:the\s+)?$"
)


def asserts(text: str, name: Name) -> bool:
    """Whether the text states `name` as a current choice: it names it at least once
    other than as the old side of a change, a negation or an experiment."""
    pattern = name.pattern
    for m in pattern.finditer(text):
        before = text[max(0, m.start() - 30) : m.start()]
        if _NEGATED_BEFORE.search(before):
            continue
        after = text[m.end() : m.end() + 40]
        if re.match(
            r"\s*(?:was|were|is|has been)\s+replaced|\s*(?:已经|已)?被|[^,.;。，；]{0,12}?"
            r"(?:删除|删掉|移除|去掉|\b(?:is|are|was|were|being|been)\s+(?:removed|deleted|dropped))",
            after,
        ):
            continue
        return True
    return False


def mentions(text: str, name: Name) -> bool:
    return name.pattern.search(text) is not None


def _roles(text: str) -> set[str]:
    """What a choice is for ("for sessions", "用于缓存"): roles of one value each."""
    out = {
        m.group(1).casefold()
        for m in re.finditer(r"\bfor\s+(?:the\s+|our\s+)?([a-z][\w-]{2,30})", text, re.I)
    }
    out |= {m.group(1) for m in re.finditer(r"(?:用于|用来|负责)([\u4e00-\u9fff]{2,6})", text)}
    return out - {"now", "all", "everything", "new", "good", "a", "this", "that", "example", "it"}


# --------------------------------------------------------------------------- the rules


def judge_by_rules(newer: str, older: str, known: Sequence[Name] = ()) -> Verdict | None:
    """The deterministic judgement of whether `newer` supersedes `older`, or None when the
    rules have nothing to say (the LLM judge, when configured, may). `known`: entities of
    the graph both memories mention (tools, libraries) that count as names besides the
    lexicon's."""
    best: Verdict | None = None
    for t in transitions(newer, known):
        verdict = _judge_transition(t, newer, older, known)
        if verdict is not None and (best is None or verdict.confidence > best.confidence):
            best = verdict
    for verdict in (_retires_record(newer, older, known), _adopts_declined(newer, older, known)):
        if verdict is not None and (best is None or verdict.confidence > best.confidence):
            best = verdict
    if best is None:
        best = _single_valued(newer, older)
    return best


# --------------------------------------------------------------------------- records

RETIRES = 0.92
"""The newer memory retires what the older one's title is about ("We will decommission our
management cluster" against "33 Manager cluster")."""
ADOPTS_DECLINED = 0.9
"""The newer memory's title chooses what the older one's decision declined ("EKS" against
"manage the cluster ourselves rather than using EKS")."""

_RETIRE = _rx(
    r"\b(?:decomm?iss?ion(?:s|ed|ing)?|retire[sd]?|retiring|sunset(?:s|ting)?|"
    r"phas(?:e|es|ed|ing) out|shut(?:s|ting)? down|turn(?:s|ed|ing)? off|"
    r"(?:transition|mov|migrat)\w*\s+away\s+from)\s+"
    r"(?:(?:the|our|its|their|all|of|existing|current|old|remaining)\s+)*"
    r"(?P<obj>[^.;:,\n]{2,80})"
)
_OBJECT_END = _rx(r"\s+(?:once|when|after|before|because|as soon|by|in favou?r|until|so that)\b")
_TITLE_CHOICE = _rx(
    r"^(?:use|using|adopt|adopting|introduce|introducing|choose|move to|switch to|"
    r"migrate to|go with|prefer)\s+(?:a\s+|an\s+|the\s+)?"
)
_TITLE_STOP = frozenset(
    {"a", "an", "the", "of", "for", "to", "in", "on", "and", "or", "our", "with", "as", "by"}
)


def _title(text: str) -> str:
    """A memory's title as a record's subject: its first line without a heading mark,
    a record number or an `ADR-12:` label."""
    from memoryd.governance.status_lines import strip_number

    first = text.strip().split("\n", 1)[0].lstrip("#").strip()
    return strip_number(first)


def _stem(word: str) -> str:
    word = word.casefold()
    for suffix in ("ements", "ement", "ments", "ment", "ers", "er", "ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _content_stems(text: str) -> list[str]:
    return [_stem(w) for w in re.findall(r"[A-Za-z][\w-]*", text) if w.lower() not in _TITLE_STOP]


def _retires_record(newer: str, older: str, known: Sequence[Name]) -> Verdict | None:
    """The newer memory decommissions, retires or moves away from the thing the older
    memory's title is about: every content word of that title (two or more, or one name)
    is in the retired object. Evidence naming both sides: the object is the older
    record's subject."""
    subject = _TITLE_CHOICE.sub("", _title(older))
    stems = _content_stems(subject)
    named = len(stems) == 1 and (
        name_of(subject, known, within=0) is not None or code_name(subject) is not None
    )
    if not stems or len(stems) > 4 or (len(stems) < 2 and not named):
        return None
    for sentence in _sentences(newer):
        if _HEDGE.search(sentence):
            continue
        for m in _RETIRE.finditer(sentence):
            obj = m.group("obj")
            end = _OBJECT_END.search(obj)
            obj = obj[: end.start()] if end else obj
            if set(stems) <= set(_content_stems(obj)):
                return Verdict(
                    RETIRES,
                    f"rule retires-record: the newer memory retires {obj.strip()!r}, what the"
                    f" older one is about ({subject!r}): {sentence.strip()[:200]!r}",
                    "rule:retires-record",
                    subject,
                )
    return None


_DECLINE = _rx(
    r"\b(?:rather than|instead of|decided against|chose not to use|not to use)\s+"
    r"(?:using\s+|use\s+|adopting\s+)?(?P<old>[^.;:,\n]{1,60})"
)


def _adopts_declined(newer: str, older: str, known: Sequence[Name]) -> Verdict | None:
    """The newer memory's title chooses what the older memory decided against ("EKS"
    after "we decided to manage the cluster ourselves rather than using EKS"): the
    older decision is reversed. Only a title that is the name alone or "Use <name>"."""
    title = _TITLE_CHOICE.sub("", _title(newer)).strip()
    chosen = names_in(title, known)
    if len(chosen) != 1 or chosen[0][0] != 0:
        return None
    name = chosen[0][1]
    if not re.fullmatch(name.pattern.pattern + r"\W*", title, re.IGNORECASE):
        return None
    for sentence in _sentences(older):
        if not re.search(r"(?i)\b(?:decided|decision|chose|we will|we)\b", sentence):
            continue
        m = _DECLINE.search(sentence)
        if m is None:
            continue
        declined = name_of(m.group("old"), known, within=0, context=sentence)
        same = declined is not None and (declined.name == name.name or _family(declined, name))
        if same and asserts(newer, name) and not _HEDGE.search(title):
            return Verdict(
                ADOPTS_DECLINED,
                f"rule adopts-declined: the newer memory chooses {name.name}, which the"
                f" older decided against: {sentence.strip()[:200]!r}",
                "rule:adopts-declined",
                None,
            )
    return None


def _judge_transition(
    t: Transition, newer: str, older: str, known: Sequence[Name]
) -> Verdict | None:
    hedged = _HEDGE.search(t.sentence) is not None
    if t.rule == "went-back":
        # "Tried Solid, went back to React": React is current. It replaces an older memory
        # that adopted what was tried (or any other value of the same kind), never one that
        # already held React.
        if t.new is None or (asserts(older, t.new) and not _adopts(older, t.new, known)):
            return None
        old = t.old if t.old is not None and asserts(older, t.old) else None
        if old is None:
            old = _same_kind_value(older, t.new, known)
        if old is None:
            return None
        return _verdict(
            "went-back",
            WENT_BACK,
            hedged,
            t,
            old,
            older,
            f"the newer memory went back to {t.new.name}, leaving {old.name}",
        )
    if t.old is None:
        # "switched to B" / "改用 B": the older memory's one value of B's kind is replaced.
        if t.new is None or mentions(older, t.new):
            return None
        old = _same_kind_value(older, t.new, known)
        folded = older.casefold()
        if old is None and any(word in folded for word in t.subject):
            # The same role, named before the change ("the docs site", "状态管理").
            values = {n.name: n for _, n in names_in(older) if asserts(older, n)}
            values.pop(t.new.name, None)
            old = next(iter(values.values())) if len(values) == 1 else None
        if old is None or (asserts(newer, old) and not _retires(newer, old)):
            return None
        return _verdict(
            t.rule,
            SWITCH_TO_SAME_KIND,
            hedged,
            t,
            old,
            older,
            f"the newer memory switched to {t.new.name}; the older chose {old.name}"
            f" ({old.kind or 'same kind'})",
        )
    if not asserts(older, t.old):
        return None
    if t.old.kind == CODE_KIND and not states_value(older, t.old):
        return None  # known only by its shape: the older memory must have chosen it
    if t.new is not None and asserts(older, t.new) and not _moved_away_from(older, t.new, known):
        return None  # the older memory already held the new value: nothing it said changed
    confidence = NO_LONGER if t.new is None else EXPLICIT
    what = (
        f"the newer memory no longer uses {t.old.name}"
        if t.new is None
        else f"the newer memory replaces {t.old.name} with {t.new.name}"
    )
    return _verdict(t.rule, confidence, hedged, t, t.old, older, what)


def _adopts(older: str, name: Name, known: Sequence[Name]) -> bool:
    """The older memory says it moved to `name` (what a later "went back" undoes)."""
    return any(t.new is not None and t.new.name == name.name for t in transitions(older, known))


def _moved_away_from(older: str, name: Name, known: Sequence[Name]) -> bool:
    """The older memory itself moved away from `name` (so naming it is not holding it)."""
    return any(t.old is not None and t.old.name == name.name for t in transitions(older, known))


def _same_kind_value(older: str, new: Name, known: Sequence[Name] = ()) -> Name | None:
    """The one value the older memory asserts of `new`'s single-valued kind, if exactly one.
    A value the older memory itself replaced ("Replace Jenkins with Concourse") is its past,
    not a second current value."""
    if new.kind not in SINGLE_VALUED_KINDS:
        return None
    values = {
        n.name: n
        for _, n in names_in(older)
        if n.kind == new.kind
        and n.name != new.name
        and not _family(n, new)
        and asserts(older, n)
        and not _moved_away_from(older, n, known)
        and _chooses(older, n, known)
    }
    return next(iter(values.values())) if len(values) == 1 else None


def _chooses(older: str, name: Name, known: Sequence[Name]) -> bool:
    """The older memory is the choice of `name`: it moved to it, or its first sentence (a
    record's title) chooses it. A memory that only uses the value on the way ("product teams
    can still use Concourse", "a Concourse pipeline creates the roles") is about something
    else, which a later "switch to" leaves standing."""
    if _adopts(older, name, known):
        return True
    first = next(iter(_sentences(older)), "")
    return _CHOICE.search(first) is not None and name.pattern.search(first) is not None


_RETIRED_BEFORE = _rx(
    r"\b(?:decomm?iss?ion(?:s|ed|ing)?|retire[sd]?|retiring|sunset(?:s|ting)?|phase out|"
    r"phasing out|phased out|turn off|turning off|shut down|shutting down|移除|下线|停用)"
    r"\s*(?:(?:the|our|all|of|existing|current|old)\s+)*$"
)
"""Words before a name that retire it ("we will decommission our Concourse pipelines")."""


def _retires(text: str, name: Name) -> bool:
    """The text says `name` is being retired: its other mentions there describe what held
    before the change, not a value kept beside the new one."""
    return any(
        _RETIRED_BEFORE.search(text[max(0, m.start() - 40) : m.start()])
        for m in name.pattern.finditer(text)
    )


def _family(a: Name, b: Name) -> bool:
    """Names of one family ("AWS" and "AWS Lambda", "Azure DevOps" and "Azure", "Amazon EC2"
    and AWS, written "Amazon Web Services" too): a service of a platform is not a rival choice
    to the platform. The family is the first word of any of a name's surfaces."""
    return not _first_words(a).isdisjoint(_first_words(b))


def _first_words(name: Name) -> frozenset[str]:
    return frozenset(s.split()[0].casefold() for s in name.surfaces if s.split())


def _verdict(
    rule: str, confidence: float, hedged: bool, t: Transition, old: Name, older: str, what: str
) -> Verdict:
    """The verdict of a change the rules recognised, demoted when it is only considered
    (hedged) or limited to a part of the system the older memory does not name."""
    notes: list[str] = []
    if hedged:
        confidence = min(confidence, HEDGED)
        notes.append("only considered, not done")
    else:
        parts = components(t.sentence)
        older_parts = components(older)
        partial = _PARTIAL.search(t.sentence) is not None
        if parts and not parts & older_parts:
            partial = True
        if partial and not (parts and parts & older_parts):
            confidence = min(confidence, PARTIAL)
            where = ", ".join(sorted(parts)) or "one part"
            notes.append(f"the change is limited to {where}, which the older memory does not name")
    reason = what + (f" ({'; '.join(notes)})" if notes else "")
    return Verdict(round(confidence, 3), f"rule {rule}: {reason}", f"rule:{rule}", old.name)


_CHOICE = _rx(
    r"\b(?:prefer|prefers|preferred|use|uses|using|chose|choose|chosen|picked|pick|go with|"
    r"went with|standardi[sz]e on|standardi[sz]ed on|runs on|run on|built (?:on|with)|"
    r"default to|defaults to)\b|"
    r"偏好|喜欢用|使用|选用|采用|选择|统一用|用"
)


def _single_valued(newer: str, older: str) -> Verdict | None:
    """A different current value for a single-valued choice, without replacement words:
    "we use pnpm" after "we use npm". Never automatic: the prompt's 0.6–0.85 band."""
    if not _CHOICE.search(newer) or not _CHOICE.search(older):
        return None
    new_values = {n.name: n for _, n in names_in(newer) if n.kind in SINGLE_VALUED_KINDS}
    old_values = {n.name: n for _, n in names_in(older) if n.kind in SINGLE_VALUED_KINDS}
    for name, new in new_values.items():
        if name in old_values:
            continue
        rivals = [
            o
            for o in old_values.values()
            if o.kind == new.kind and o.name not in new_values and not _family(o, new)
        ]
        if len(rivals) != 1:
            continue
        old = rivals[0]
        if not _chooses(older, old, ()):
            continue  # the older memory uses it on the way ("need to move to postgres")
        roles_new, roles_old = _roles(newer), _roles(older)
        if roles_new and roles_old and not roles_new & roles_old:
            continue
        if _HEDGE.search(newer):
            continue
        return Verdict(
            SINGLE_VALUED,
            f"rule single-valued: the newer memory chooses {new.name} where the older chose"
            f" {old.name} ({new.kind}, one per role)",
            "rule:single-valued",
            old.name,
        )
    return None


# --------------------------------------------------------------------------- pairs


@dataclass(frozen=True)
class Pair:
    """An older memory to judge a newer one against, and what they share."""

    older: str
    older_text: str
    entity_id: str | None
    entity_name: str
    known: tuple[Name, ...] = ()
    """The tools and libraries of the graph both memories mention: names the rules may take
    as the replaced thing besides the lexicon's."""


@dataclass
class SupersedeJob:
    """The judging of one newer memory: pairs, then a verdict per pair (rules, then LLM)."""

    newer: str
    newer_text: str
    pairs: list[Pair] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    """older slug → verdict, for the pairs that got one."""
    llm_errors: list[str] = field(default_factory=list)
    session: bool = False
    """The newer memory is a captured session: a transcript, not a statement of what holds."""


SESSION_UNKNOWN_CAP = PARTIAL
"""A session says "replace `foo` with `bar`" about code all the time: from a transcript, only
a change between names the lexicon knows (tools, frameworks, databases) is automatic."""


def judge_pairs(job: SupersedeJob) -> None:
    """Run the rules over every pair of the job (pure: no store, no network)."""
    for pair in job.pairs:
        verdict = judge_by_rules(job.newer_text, pair.older_text, pair.known)
        if verdict is None:
            continue
        if job.session and (verdict.old is None or verdict.old.casefold() not in _lexicon()):
            verdict = Verdict(
                min(verdict.confidence, SESSION_UNKNOWN_CAP),
                verdict.reason + " (from a session transcript, about a name memoryd does not know)",
                verdict.judge,
                verdict.old,
            )
        job.verdicts[pair.older] = verdict


MAX_AUTOMATIC = 2
"""The most older memories one newer memory replaces automatically. A record that would
replace more at once is almost always restating a general choice (one ADR "superseded" 20
on the real records): those verdicts wait for a human. Measured in bench/RESULTS.md."""


def limit_fan_out(verdicts: dict[str, Verdict], tiers: Tiers, *, already: int = 0) -> None:
    """Demote to candidates the automatic verdicts of a newer memory that would replace
    more than `MAX_AUTOMATIC` older ones at once (an explicit status line is not counted:
    a record may name several it replaces). `already`: automatic supersedes the newer
    memory holds from earlier judging, counted with these."""
    auto = [
        older
        for older, v in verdicts.items()
        if v.confidence >= tiers.auto and v.judge != STATUS_JUDGE
    ]
    if len(auto) + already <= MAX_AUTOMATIC:
        return
    for older in auto:
        v = verdicts[older]
        verdicts[older] = Verdict(
            round(min(v.confidence, FAN_OUT), 3),
            f"{v.reason} (one of {len(auto) + already} older memories it would replace at once:"
            " for a human to confirm)",
            v.judge,
            v.old,
        )


def needs_llm(job: SupersedeJob, tiers: Tiers, limit: int) -> list[Pair]:
    """Pairs the rules left undecided or only as candidates: the LLM's to judge."""
    out = [
        p
        for p in job.pairs
        if p.older not in job.verdicts or job.verdicts[p.older].confidence < tiers.auto
    ]
    return out[:limit]


def judge_with_llm(job: SupersedeJob, llm: LLMProvider, pairs: Iterable[Pair]) -> None:
    """Ask the LLM judge about these pairs; its verdict replaces a rule's candidate (it read
    both memories whole). A failure is noted and leaves the rules' verdict."""
    from memoryd.llm.extract import judge_supersedes

    for pair in pairs:
        try:
            judgement = judge_supersedes(llm, job.newer_text, pair.older_text, pair.entity_name)
        except MemorydError as exc:
            job.llm_errors.append(f"{pair.older}: {exc.message}")
            continue
        rule = job.verdicts.get(pair.older)
        reason = judgement.reason.strip() or "no reason given"
        if rule is not None:
            reason += f" (rules said {rule.confidence:.2f}: {rule.reason})"
        job.verdicts[pair.older] = Verdict(
            round(judgement.confidence, 3),
            f"llm: {reason}",
            f"llm:{llm.name}/{llm.model}",
        )


def pair_texts(title: str, body: str) -> str:
    return f"{title}\n\n{body}".strip()


def outcome_counts(
    tiers: Tiers, labelled: Sequence[tuple[bool, float | None]]
) -> dict[str, dict[str, int]]:
    """Per tier, the confusion counts of (label, confidence) pairs: a pair is predicted
    positive at a tier when its confidence reaches that tier's threshold."""
    table: dict[str, dict[str, int]] = {}
    for tier, threshold in (("auto", tiers.auto), ("candidate", tiers.candidate)):
        counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
        for label, confidence in labelled:
            predicted = confidence is not None and confidence >= threshold
            key = ("tp" if label else "fp") if predicted else ("fn" if label else "tn")
            counts[key] += 1
        table[tier] = counts
    return table


def precision_recall(counts: dict[str, int]) -> tuple[float, float]:
    tp, fp, fn = counts["tp"], counts["fp"], counts["fn"]
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return precision, recall


# --------------------------------------------------------------------------- the stores

JUDGED_TYPES = ("decision", "preference", "fact")
"""The older memories a new one may supersede (seeds/002 §5)."""

_PAIRS_QUERY = (
    "MATCH (n:Memory {slug: $slug})-[:MENTIONS]->(e:Entity)<-[:MENTIONS]-(o:Memory)"
    " WHERE o.scope_hash = n.scope_hash AND o.slug <> n.slug AND o.type IN $types"
    " AND o.created_at <= n.created_at AND o.decay_state <> 'forgotten' AND NOT o.sensitive"
    " AND NOT EXISTS { MATCH (o)-[:SUPERSEDES]->(n) }"
    " RETURN o.slug, o.title, o.body, o.created_at, e.id, e.name, e.mention_count, e.type,"
    " e.aliases"
    " ORDER BY o.created_at DESC, o.slug"
)


def find_pairs(graph: GraphStore, newer: Memory, *, limit: int) -> list[Pair]:
    """The older preference, decision and fact memories of the newer one's scope that share
    an entity with it, each with the most specific entity they share (the least mentioned:
    `React` says more than `frontend`), those sharing the most specific one first. Pairs
    already decided are left out, and so is a memory that itself replaces the newer one.
    Timestamps are to the second: one written in the same second counts as older (judging
    runs as the newer one is written)."""
    decided = set(newer.meta.supersedes) | {d.older for d in newer.meta.supersede_decisions}
    # A record it amends (a status line said so) is refined, not replaced.
    decided |= {r.object for r in newer.meta.relations if r.label == "amends"}
    rows = graph.cypher(
        _PAIRS_QUERY, {"slug": newer.slug, "types": list(JUDGED_TYPES)}, limit=100_000
    ).rows
    texts = {str(r[0]): pair_texts(str(r[1]), str(r[2] or "")) for r in rows}
    return _pairs([r[:1] + r[3:] for r in rows], texts, decided, limit)


def _pairs(
    rows: Sequence[Sequence[Any]], texts: dict[str, str], decided: set[str], limit: int
) -> list[Pair]:
    """Rows of (older slug, created_at, entity id, name, mention count, type, aliases), newest
    older first, as pairs: each with its most specific shared entity and the tools and
    libraries both memories mention, the `limit` with the most specific one kept."""
    best: dict[str, tuple[int, Pair]] = {}
    known: dict[str, dict[str, Name]] = {}
    order: list[str] = []
    for slug, _created, eid, name, mentioned, etype, aliases in rows:
        if slug in decided:
            continue
        if etype in GRAPH_CHOICE_TYPES and name:
            surfaces = tuple(dict.fromkeys([str(name), *(str(a) for a in aliases or ())]))
            known.setdefault(slug, {})[str(eid)] = Name(str(name), surfaces, str(etype))
        pair = Pair(str(slug), texts[str(slug)], str(eid), str(name))
        count = int(mentioned or 0)
        if slug not in best:
            order.append(slug)
            best[slug] = (count, pair)
        elif count < best[slug][0]:
            best[slug] = (count, pair)
    # The `limit` older memories sharing the most specific entity first (newest first among
    # equals): a record that shares the replaced tool with the newer one is judged before
    # twenty newer ones that share only the platform both run on.
    ranked = sorted(order, key=lambda slug: best[slug][0])
    return [
        replace(best[slug][1], known=tuple(known.get(slug, {}).values())) for slug in ranked[:limit]
    ]


# A batch's candidate pairs come from the entities its memories mention and, once per entity,
# the memories that mention it: one row per (newer, older, shared entity) took 478k rows for
# 500 new memories in a 10k-memory scope (32 s of CPU), and kuzu 0.11.3 planned the
# one-pattern form as a scan of every memory (a full buffer pool for a batch).
_NEWER_ENTITIES = (
    "UNWIND $slugs AS s MATCH (n:Memory {slug: s})-[:MENTIONS]->(e:Entity)"
    " RETURN n.slug, n.scope_hash, n.created_at, e.id, e.name, e.mention_count, e.type, e.aliases"
)
_MENTIONED_BY = (
    "UNWIND $ids AS i MATCH (e:Entity {id: i})<-[:MENTIONS]-(o:Memory)"
    " WHERE o.scope_hash IN $scopes AND o.type IN $types AND o.decay_state <> 'forgotten'"
    " AND NOT o.sensitive RETURN e.id, o.scope_hash, o.slug, o.created_at"
)
_PAIRS_DECIDED = (
    "UNWIND $slugs AS s MATCH (n:Memory {slug: s})-[:SUPERSEDES]-(o:Memory) RETURN n.slug, o.slug"
)


@dataclass(frozen=True)
class _Shared:
    """An entity a newer memory mentions, as `_pairs` ranks it."""

    count: int
    id: str
    name: str
    type: str
    aliases: tuple[str, ...]


def find_pairs_many(
    graph: GraphStore, newers: Sequence[Memory], *, limit: int
) -> dict[str, list[Pair]]:
    """`find_pairs` for a batch of newly written memories in four queries instead of one per
    memory (an import judges hundreds), the same pairs in the same order: per newer memory
    the `limit` older ones sharing its least mentioned entity first, newest first among
    equals. A pair with a SUPERSEDES edge either way is left out (status lines were written
    first); what the newer memory's file decided otherwise is left out as in `find_pairs`."""
    if not newers:
        return {}
    slugs = [m.slug for m in newers]
    linked = {
        (str(n), str(o))
        for n, o in graph.cypher(_PAIRS_DECIDED, {"slugs": slugs}, limit=10_000_000).rows
    }
    shared: dict[str, list[_Shared]] = {}
    where: dict[str, tuple[str, Any]] = {}  # newer slug -> (scope hash, created_at)
    for n, scope, created, eid, name, count, etype, aliases in graph.cypher(
        _NEWER_ENTITIES, {"slugs": slugs}, limit=10_000_000
    ).rows:
        where[str(n)] = (str(scope), created)
        entity = _Shared(
            int(count or 0), str(eid), str(name or ""), str(etype or ""), tuple(aliases or ())
        )
        mine = shared.setdefault(str(n), [])
        if all(e.id != entity.id for e in mine):  # one entity may have two MENTIONS edges
            mine.append(entity)
    # Per (entity, scope), the older memories mentioning it as ranks in the order `_pairs`
    # takes them: newest first, then by slug.
    mentioned: dict[tuple[str, str], list[tuple[Any, str]]] = {}
    if shared:
        ids = sorted({e.id for entities in shared.values() for e in entities})
        scopes = sorted({scope for scope, _ in where.values()})
        for eid, scope, o, created in graph.cypher(
            _MENTIONED_BY,
            {"ids": ids, "scopes": scopes, "types": list(JUDGED_TYPES)},
            limit=100_000_000,
        ).rows:
            mentioned.setdefault((str(eid), str(scope)), []).append((created, str(o)))
    everyone = sorted({row for rows in mentioned.values() for row in rows}, key=lambda r: r[1])
    everyone.sort(key=lambda r: r[0], reverse=True)  # stable: by slug among equal times
    rank = {row: i for i, row in enumerate(everyone)}
    ranked = {key: sorted(rank[row] for row in rows) for key, rows in mentioned.items()}
    members = {key: {o for _, o in rows} for key, rows in mentioned.items()}
    chosen: dict[str, list[tuple[str, _Shared, tuple[Name, ...]]]] = {}
    for memory in newers:
        if memory.slug not in where:
            continue
        decided = set(memory.meta.supersedes) | {d.older for d in memory.meta.supersede_decisions}
        decided |= {r.object for r in memory.meta.relations if r.label == "amends"}
        decided |= {o for n, o in linked if n == memory.slug}
        decided.add(memory.slug)
        chosen[memory.slug] = _nearest(
            sorted(shared[memory.slug], key=lambda e: (e.count, e.id)),
            where[memory.slug],
            decided,
            limit,
            everyone,
            ranked,
            members,
        )
    olders = sorted({o for picks in chosen.values() for o, _, _ in picks})
    texts = {
        str(slug): pair_texts(str(title), str(body or ""))
        for slug, title, body in graph.cypher(
            "UNWIND $slugs AS s MATCH (o:Memory {slug: s}) RETURN o.slug, o.title, o.body",
            {"slugs": olders},
            limit=10_000_000,
        ).rows
    }
    return {
        m.slug: [Pair(o, texts[o], e.id, e.name, known) for o, e, known in chosen.get(m.slug, [])]
        for m in newers
    }


def _nearest(
    entities: list[_Shared],
    at: tuple[str, Any],
    decided: set[str],
    limit: int,
    everyone: list[tuple[Any, str]],
    ranked: dict[tuple[str, str], list[int]],
    members: dict[tuple[str, str], set[str]],
) -> list[tuple[str, _Shared, tuple[Name, ...]]]:
    """The `limit` older memories of one newer memory's scope (`at`: its scope and time) that
    share one of its `entities` (least mentioned first), as `_pairs` ranks them: by their
    least mentioned shared entity, then newest first; each with that entity and the tools
    and libraries it shares. Reads only as far as the `limit`th."""
    scope, created = at
    out: list[tuple[str, _Shared]] = []
    taken: set[str] = set()
    i = 0
    while i < len(entities) and len(out) < limit:
        group = [e for e in entities[i:] if e.count == entities[i].count]
        i += len(group)
        first: dict[str, _Shared] = {}  # older slug -> its entity in this group (by id)
        lists = [(e, ranked.get((e.id, scope), [])) for e in group]
        for r in heapq.merge(*(rows for _, rows in lists)):
            when, o = everyone[r]
            if o in taken or o in decided or when > created or o in first:
                continue
            first[o] = next(e for e, _ in lists if o in members.get((e.id, scope), ()))
            out.append((o, first[o]))
            if len(out) >= limit:
                break
        taken.update(first)
    return [
        (
            o,
            e,
            tuple(
                Name(s.name, tuple(dict.fromkeys([s.name, *s.aliases])), s.type)
                for s in entities
                if s.type in GRAPH_CHOICE_TYPES and s.name and o in members.get((s.id, scope), ())
            ),
        )
        for o, e in out
    ]


def pair_of(graph: GraphStore, newer: str, older: str) -> Pair | None:
    """One pair as `find_pairs` sees it (the older memory's text and the tools and
    libraries both mention), whatever was decided about it; None when the older memory is
    gone, forgotten or sensitive."""
    rows = graph.cypher(
        "MATCH (o:Memory {slug: $older}) WHERE o.decay_state <> 'forgotten' AND NOT o.sensitive"
        " OPTIONAL MATCH (n:Memory {slug: $newer})-[:MENTIONS]->(e:Entity)<-[:MENTIONS]-(o)"
        " RETURN o.title, o.body, e.id, e.name, e.type, e.aliases",
        {"newer": newer, "older": older},
        limit=10_000,
    ).rows
    if not rows:
        return None
    known: dict[str, Name] = {}
    for _title, _body, eid, name, etype, aliases in rows:
        if eid is not None and etype in GRAPH_CHOICE_TYPES and name:
            surfaces = tuple(dict.fromkeys([str(name), *(str(a) for a in aliases or ())]))
            known[str(eid)] = Name(str(name), surfaces, str(etype))
    title, body, eid, name = rows[0][:4]
    return Pair(
        older,
        pair_texts(str(title), str(body or "")),
        None if eid is None else str(eid),
        str(name or ""),
        tuple(known.values()),
    )


def automatic(graph: GraphStore, scope_hash: str | None = None) -> list[SupersedeRow]:
    """Automatic supersede decisions (active and candidates) with their judge, rules
    version and reason, newest first."""
    return _edge_rows(
        graph,
        "r.decided_by = 'auto' AND r.status IN ['active', 'candidate']",
        "r.decided_at DESC, n.slug, o.slug",
        scope_hash,
        limit=1_000_000,
    )


def _edge_rows(
    graph: GraphStore, where: str, order: str, scope_hash: str | None, *, limit: int
) -> list[SupersedeRow]:
    """SUPERSEDES edges matching `where` (over `n`-[r]->`o`) in the scope, as rows."""
    result = graph.cypher(
        f"MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) WHERE {where}"
        " AND ($scope IS NULL OR n.scope_hash = $scope)"
        " RETURN n.slug, o.slug, r.entity_id, r.confidence, r.decided_at, r.decided_by,"
        f" r.reason, r.status, r.judge, r.rules ORDER BY {order}",
        {"scope": scope_hash},
        limit=limit,
    )
    keys = list(SupersedeRow.model_fields)  # the RETURN order above
    return [SupersedeRow.model_validate(dict(zip(keys, r, strict=True))) for r in result.rows]


def new_decisions(job: SupersedeJob, tiers: Tiers, now: datetime) -> list[SupersedeDecision]:
    """The decisions the job's verdicts make: automatic or candidate; the rest are ignored."""
    entity = {p.older: p.entity_id for p in job.pairs}
    limit_fan_out(job.verdicts, tiers)
    out: list[SupersedeDecision] = []
    for older, verdict in job.verdicts.items():
        status = tiers.status(verdict.confidence)
        if status is None:
            continue
        out.append(
            SupersedeDecision(
                older=older,
                status=status,
                confidence=verdict.confidence,
                decided_by="auto",
                decided_at=now,
                judge=verdict.judge,
                entity_id=entity.get(older),
                reason=verdict.reason,
                rules=RULES_VERSION if verdict.judge.startswith("rule:") else None,
            )
        )
    return out


def with_decisions(memory: Memory, decisions: Sequence[SupersedeDecision]) -> dict[str, Any]:
    """Frontmatter changes that add these decisions (replacing any about the same pair)."""
    changed = {d.older: d for d in decisions}
    kept = [d for d in memory.meta.supersede_decisions if d.older not in changed]
    supersedes = [s for s in memory.meta.supersedes if s not in changed]
    supersedes += [d.older for d in decisions if d.status is SupersedeStatus.ACTIVE]
    return {
        "supersede_decisions": [*kept, *decisions],
        "supersedes": list(dict.fromkeys(supersedes)),
    }


SupersedeAction = Literal["undo", "accept", "reject"]
_ACTION_NEEDS: dict[str, SupersedeStatus] = {
    "undo": SupersedeStatus.ACTIVE,
    "accept": SupersedeStatus.CANDIDATE,
    "reject": SupersedeStatus.CANDIDATE,
}
_ACTION_GIVES: dict[str, SupersedeStatus] = {
    "undo": SupersedeStatus.UNDONE,
    "accept": SupersedeStatus.ACTIVE,
    "reject": SupersedeStatus.REJECTED,
}


def current_decision(newer: Memory, older: str) -> SupersedeDecision | None:
    """Where the pair stands in the newer memory's file; a slug in `supersedes` without a
    kept decision was set by hand (active, decided by the user)."""
    for d in newer.meta.supersede_decisions:
        if d.older == older:
            return d
    if older in newer.meta.supersedes:
        return SupersedeDecision(older=older, decided_by="user", decided_at=newer.meta.created_at)
    return None


def decide(
    newer: Memory, older: str, action: SupersedeAction, *, by: str, now: datetime
) -> SupersedeDecision:
    """The decision a person's `undo`, `accept` or `reject` makes of the pair.

    Raises NotFound when the pair was never judged and Conflict when it is not in the state
    the action needs (accepting twice, undoing a candidate)."""
    current = current_decision(newer, older)
    if current is None:
        raise NotFound(
            f"{newer.slug} has no supersede decision about {older}",
            hint="`memoryd supersede list` shows the candidates waiting for a decision",
        )
    needed = _ACTION_NEEDS[action]
    if current.status is not needed:
        verb = {"undo": "undo", "accept": "accept", "reject": "reject"}[action]
        raise Conflict(
            f"cannot {verb} {newer.slug} → {older}: it is {current.status.value}"
            f" (decided by {current.decided_by}), not {needed.value}",
            hint="undo applies to active supersedes, accept and reject to candidates",
        )
    return current.model_copy(
        update={"status": _ACTION_GIVES[action], "decided_by": by, "decided_at": now}
    )


def candidates(graph: GraphStore, scope_hash: str | None = None) -> list[SupersedeRow]:
    """Supersede candidates waiting for a human (SUPERSEDES edges with status `candidate`),
    most confident first: `memoryd supersede list` and the digest."""
    return _edge_rows(
        graph,
        "r.status = 'candidate'",
        "r.confidence DESC, r.decided_at, n.slug",
        scope_hash,
        limit=100_000,
    )
