"""The deterministic supersede rules: confidences, verdicts and tiers, and the rules that
judge one newer text against one older (transitions, record status lines, single-valued
choices), so `bench/supersede.py` measures them exactly as the service runs them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from memoryd.governance.supersede_names import (
    CODE_KIND,
    SINGLE_VALUED_KINDS,
    Name,
    _rx,
    code_name,
    name_of,
    names_in,
    states_value,
)
from memoryd.governance.supersede_patterns import (
    _HEDGE,
    _PARTIAL,
    Transition,
    _components,
    _roles,
    _sentences,
    asserts,
    mentions,
    transitions,
    worded,
)
from memoryd.governance.supersede_version import RULES_VERSION as RULES_VERSION
from memoryd.models import SupersedeStatus

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
HEDGED = 0.35
"""A transition that is only considered, planned or asked about: the newer memory does not
present it as the current state."""


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


# --------------------------------------------------------------------------- the rules


def judge_by_rules(newer: str, older: str, known: Sequence[Name] = ()) -> Verdict | None:
    """The deterministic judgement of whether `newer` supersedes `older`, or None when the
    rules have nothing to say (the LLM judge, when configured, may). `known`: entities of
    the graph both memories mention (tools, libraries) that count as names besides the
    lexicon's."""
    if not may_supersede(newer, older):
        return None
    return _judge(newer, older, known)


def may_supersede(newer: str, older: str) -> bool:
    """A necessary condition for any rule to judge that `newer` supersedes `older`, from what
    each text holds alone (read once per text, whatever names the pair shares): a change
    stated in the newer text (replacement wording or something retired), a decision of the
    older one that declined something, or a single-valued choice in the newer text and a
    choice stated in the older. Most pairs of a batch meet none (bench/RESULTS.md)."""
    changes, chooses = _as_newer(newer)
    if changes:
        return True  # `transitions` or `_retires_record` may find it
    declines, states = _as_older(older)
    return declines or (chooses and states)  # `_adopts_declined`, `_single_valued`


@lru_cache(maxsize=8192)
def _as_newer(text: str) -> tuple[bool, bool]:
    """Whether a text states a change (`worded`, `_retired`) and chooses a single-valued
    value (`_chosen_values`): what the rules need of a newer memory."""
    return worded(text) or bool(_retired(text)), bool(_chosen_values(text))


@lru_cache(maxsize=8192)
def _as_older(text: str) -> tuple[bool, bool]:
    """Whether a text declines something (`_declines`) and states a choice
    (`_chosen_values`): what the rules need of an older memory besides the newer's change."""
    return bool(_declines(text)), _chosen_values(text) is not None


def _judge(newer: str, older: str, known: Sequence[Name]) -> Verdict | None:
    """`judge_by_rules` for a pair that `may_supersede`."""
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


@lru_cache(maxsize=8192)
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
    retired = _retired(newer)
    if not retired:
        return None  # nothing retired: the older memory's title is not read
    subject, stems = _subject_stems(older)
    named = len(stems) == 1 and (
        name_of(subject, known, within=0) is not None or code_name(subject) is not None
    )
    if not stems or len(stems) > 4 or (len(stems) < 2 and not named):
        return None
    for sentence, obj, words in retired:
        if set(stems) <= words:
            return Verdict(
                RETIRES,
                f"rule retires-record: the newer memory retires {obj.strip()!r}, what the"
                f" older one is about ({subject!r}): {sentence.strip()[:200]!r}",
                "rule:retires-record",
                subject,
            )
    return None


@lru_cache(maxsize=8192)
def _subject_stems(text: str) -> tuple[str, tuple[str, ...]]:
    """What a record's title is about and its content stems, read once per older memory
    (a batch judges each older one against many newer ones)."""
    subject = _TITLE_CHOICE.sub("", _title(text))
    return subject, tuple(_content_stems(subject))


@lru_cache(maxsize=4096)
def _retired(text: str) -> tuple[tuple[str, str, frozenset[str]], ...]:
    """What each unhedged sentence of a text retires: (sentence, object, its content stems),
    read once per newer memory rather than once per pair."""
    out = []
    for sentence in _sentences(text):
        found = list(_RETIRE.finditer(sentence))
        if not found or _hedged(sentence):
            continue
        for m in found:
            obj = m.group("obj")
            end = _OBJECT_END.search(obj)
            obj = obj[: end.start()] if end else obj
            out.append((sentence, obj, frozenset(_content_stems(obj))))
    return tuple(out)


_DECLINE = _rx(
    r"\b(?:rather than|instead of|decided against|chose not to use|not to use)\s+"
    r"(?:using\s+|use\s+|adopting\s+)?(?P<old>[^.;:,\n]{1,60})"
)


def _adopts_declined(newer: str, older: str, known: Sequence[Name]) -> Verdict | None:
    """The newer memory's title chooses what the older memory decided against ("EKS"
    after "we decided to manage the cluster ourselves rather than using EKS"): the
    older decision is reversed. Only a title that is the name alone or "Use <name>"."""
    declines = _declines(older)
    if not declines:
        return None  # the older memory declined nothing: the newer one's title is not read
    title = _chosen_title(newer)
    chosen = names_in(title, known)
    if len(chosen) != 1 or chosen[0][0] != 0:
        return None
    name = chosen[0][1]
    if not re.fullmatch(name.pattern.pattern + r"\W*", title, re.IGNORECASE):
        return None
    for sentence, slot in declines:
        declined = name_of(slot, known, within=0, context=sentence)
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


@lru_cache(maxsize=8192)
def _declines(text: str) -> tuple[tuple[str, str], ...]:
    """Each sentence of a decision that declines something ("rather than using EKS"), with
    the declined slot: read once per older memory, which a batch judges against many newer
    ones (most decline nothing, and then `_adopts_declined` reads no title)."""
    out = []
    for sentence in _sentences(text):
        if not _DECIDED.search(sentence):
            continue
        m = _DECLINE.search(sentence)
        if m is not None:
            out.append((sentence, m.group("old")))
    return tuple(out)


_DECIDED = _rx(r"\b(?:decided|decision|chose|we will|we)\b")


@lru_cache(maxsize=8192)
def _chosen_title(text: str) -> str:
    """A memory's title without "Use" / "Switch to" before what it chooses."""
    return _TITLE_CHOICE.sub("", _title(text)).strip()


@lru_cache(maxsize=16384)
def _hedged(sentence: str) -> bool:
    return _HEDGE.search(sentence) is not None


def _judge_transition(
    t: Transition, newer: str, older: str, known: Sequence[Name]
) -> Verdict | None:
    hedged = _hedged(t.sentence)
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
        parts = _components(t.sentence)
        older_parts = _components(older)
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


@lru_cache(maxsize=8192)
def _chosen_values(text: str) -> Mapping[str, Name] | None:
    """The lexicon's single-valued names in a text that states a choice, by name (None: no
    choice stated), read once per text: a batch judges each older memory many times. The
    callers only read it."""
    if not _CHOICE.search(text):
        return None
    return MappingProxyType({n.name: n for _, n in names_in(text) if n.kind in SINGLE_VALUED_KINDS})


def _single_valued(newer: str, older: str) -> Verdict | None:
    """A different current value for a single-valued choice, without replacement words:
    "we use pnpm" after "we use npm". Never automatic: the prompt's 0.6–0.85 band."""
    new_values = _chosen_values(newer)
    if not new_values:
        return None  # no choice, or none of a single-valued kind: nothing to replace
    old_values = _chosen_values(older)
    if old_values is None:
        return None
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
