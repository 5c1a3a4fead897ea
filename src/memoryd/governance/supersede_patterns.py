"""Replacement wording for supersede judging: the English and Chinese transition patterns
("switch from A to B", "从 A 切到 B"), the sentences and components they read, and the
checks that a text asserts or mentions a name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.governance.supersede_names import (
    _FILLER,
    Name,
    _rx,
    code_name,
    name_of,
    names_in,
    new_of,
    word_name,
)

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
_FROM_TO_NEEDS = {"replaced-by": _rx(r"replaced"), "zh-replaced-by": _rx("被")}
"""A word every match of these patterns holds, searched first: a pattern that opens on a slot
tries each place of a sentence as its start, the word costs one pass (bench/RESULTS.md)."""
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
    return list(_split(text))


@functools.lru_cache(maxsize=4096)
def _split(text: str) -> tuple[str, ...]:
    """A text's sentences, split once: judging reads one newer memory's text against each of
    its twenty older ones."""
    return tuple(s.strip() for s in _SENTENCE.findall(text) if s.strip())


def components(text: str) -> set[str]:
    """Parts of a system a sentence names ("the billing service", "支付服务")."""
    return set(_components(text))


@functools.lru_cache(maxsize=8192)
def _components(text: str) -> frozenset[str]:
    """`components`, read once per text: an older memory's parts are compared with the
    sentence of each change judged against it."""
    found: set[str] = set()
    for m in _COMPONENT.finditer(text):
        word = (m.group(1) or m.group(2) or "").casefold()
        if word and word not in _COMPONENT_STOP:
            found.add(word)
    return frozenset(found)


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
    if not _worded(text):
        return []  # no wording: no names to read, whatever `known` holds
    return list(_transitions(text, tuple(known)))


def forget_texts() -> None:
    """Drop the texts `transitions` keeps: a judging job calls it when done, so no memory's
    text (one since forgotten, a long session's) stays in the process's heap after it."""
    _transitions.cache_clear()


@functools.lru_cache(maxsize=4096)
def _transitions(text: str, known: tuple[Name, ...]) -> tuple[Transition, ...]:
    """`transitions`, once per (text, names): a newer memory's text is read against each of
    its twenty pairs, most of which share the same names with it (`forget_texts`)."""
    out: list[Transition] = []
    for sentence, wording in _worded(text):
        for reader in (_went_back, _from_to, _instead_of, _no_longer, _switch_to):
            found = reader(sentence, wording, known)
            if found:
                out.extend(found)
                break
    return tuple(out)


@dataclass(frozen=True)
class _Wording:
    """What each kind of replacement wording matches in one sentence, before any name is read
    from its slots: the patterns depend on the sentence alone, the names on the pair
    (`known`). Each reader of `_transitions` finds nothing where its part is empty."""

    back: tuple[str, str | None] | None
    """"went back to B": the slot of B, and of what was tried, if the sentence says."""
    from_to: tuple[tuple[str, str, str], ...]
    """Each "from A to B" as (rule, A's slot, B's slot)."""
    instead: tuple[tuple[str, str, int], ...]
    """Per rule, its first "instead of A": (rule, A's slot, where the match starts)."""
    no_longer: tuple[tuple[str, str], ...]
    """Per rule, its first "no longer A": (rule, A's slot)."""
    switch: tuple[tuple[str, str, int], ...]
    """Per rule, its first "switched to B": (rule, B's slot, where the match starts)."""


def worded(text: str) -> bool:
    """Whether any sentence of the text holds replacement wording: when none does,
    `transitions` finds no change in it whatever names the pair shares (a pair's cheap
    first test: most texts state no change)."""
    return bool(_worded(text))


@functools.lru_cache(maxsize=8192)
def _worded(text: str) -> tuple[tuple[str, _Wording], ...]:
    """The sentences of a text that hold replacement wording, with what it matched: read
    once per text, not once per pair."""
    out = []
    for sentence in _sentences(text):
        wording = _wording(sentence)
        if wording is not None:
            out.append((sentence, wording))
    return tuple(out)


@functools.lru_cache(maxsize=16384)
def _wording(sentence: str) -> _Wording | None:
    """The replacement wording of one sentence (`_Wording`), matched once per sentence: the
    patterns cost most of judging. None: no pattern matches it."""
    back = _WENT_BACK.search(sentence)
    tried = _TRIED.search(sentence) if back is not None else None
    from_to = tuple(
        (rule, m.group("old"), m.group("new"))
        for rule, rx in _FROM_TO
        if rule not in _FROM_TO_NEEDS or _FROM_TO_NEEDS[rule].search(sentence)
        for m in rx.finditer(sentence)
    )
    instead = tuple(
        (rule, m.group("old"), m.start())
        for rule, rx in _INSTEAD
        if (m := rx.search(sentence)) is not None
    )
    no_longer = tuple(
        (rule, m.group("old")) for rule, rx in _NO_LONGER if (m := rx.search(sentence)) is not None
    )
    switch = tuple(
        (rule, m.group("new"), m.start())
        for rule, rx in _SWITCH_TO
        if (m := rx.search(sentence)) is not None
    )
    if back is None and not (from_to or instead or no_longer or switch):
        return None
    slots = None if back is None else (back.group("new"), tried.group("old") if tried else None)
    return _Wording(slots, from_to, instead, no_longer, switch)


def _went_back(sentence: str, wording: _Wording, known: Sequence[Name]) -> list[Transition]:
    if wording.back is None:
        return []
    new_slot, tried = wording.back
    old = name_of(tried, known, context=sentence) if tried is not None else None
    new = new_of(new_slot, known, context=sentence)
    return [Transition("went-back", old, new, sentence)]


def _from_to(sentence: str, wording: _Wording, known: Sequence[Name]) -> list[Transition]:
    out: list[Transition] = []
    for rule, old_slot, new_slot in wording.from_to:
        old = name_of(old_slot, known, context=sentence)
        new = new_of(new_slot, known, context=sentence)
        if old is None and name_of(new_slot, known, context=sentence) is not None:
            old = word_name(old_slot)  # "from requests to httpx": both sides named
        if old is not None and new is not None and old.name == new.name:
            old, new = _versioned(old_slot), _versioned(new_slot)
        if old is not None and new is not None and old.name != new.name:
            out.append(Transition(rule, old, new, sentence))
    return out


_CLAUSE_BREAK = re.compile(r"\s[-–—]\s|[;:；：]|\bbut\b|但是?")


def _instead_of(sentence: str, wording: _Wording, known: Sequence[Name]) -> list[Transition]:
    for rule, old_slot, start in wording.instead:
        old = name_of(old_slot, known, context=sentence)
        # The replacement is named in the same clause: in "doesn't need ElasticSearch
        # often - rather than use Kibana, the team uses kubectl" it is not ElasticSearch.
        clause = _CLAUSE_BREAK.split(sentence[:start])[-1]
        before = [n for _, n in names_in(clause, known)]
        # A name memoryd does not know counts right before the contrast: "use httpx
        # instead of requests", not a word anywhere in a long clause.
        before = before or [
            n for w in re.split(r"\s+", clause.rstrip())[-3:] if (n := code_name(w)) is not None
        ]
        new = before[-1] if before else None
        if old is None and new is not None:
            old = word_name(old_slot)  # "use httpx instead of requests"
        # "rather than use Kibana, the team mostly uses `kubectl logs`": a contrast that
        # names no replacement in its clause describes a practice, not a change.
        if old is not None and new is not None and new.name != old.name:
            return [Transition(rule, old, new, sentence)]
    return []


def _no_longer(sentence: str, wording: _Wording, known: Sequence[Name]) -> list[Transition]:
    for rule, old_slot in wording.no_longer:
        # What is no longer used is the verb's object: "don't support the AWS agent" is not
        # "no longer uses AWS".
        old = name_of(_FILLER.sub("", old_slot), known, within=0, context=sentence)
        if old is not None:
            return [Transition(rule, old, None, sentence)]
    return []


def _switch_to(sentence: str, wording: _Wording, known: Sequence[Name]) -> list[Transition]:
    for rule, new_slot, start in wording.switch:
        # One side only: the name must be one memoryd knows (its kind finds the old one).
        new = name_of(new_slot, known, context=sentence, code=False)
        if new is not None:
            subject = frozenset(subject_before(sentence, start))
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
    return _asserts(text, name)


@functools.lru_cache(maxsize=16384)
def _asserts(text: str, name: Name) -> bool:
    """`asserts`, once per (text, name): an older memory is asked about the same names by
    each newer one judged against it."""
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
