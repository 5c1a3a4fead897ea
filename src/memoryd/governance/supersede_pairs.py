"""Judging candidate pairs: the pair and job types, rules first then the LLM judge for what
the rules cannot decide, the fan-out limit, and the precision / recall counts benches use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from memoryd.errors import MemorydError
from memoryd.governance.supersede_names import Name, _lexicon
from memoryd.governance.supersede_patterns import forget_texts
from memoryd.governance.supersede_rules import (
    FAN_OUT,
    PARTIAL,
    STATUS_JUDGE,
    Tiers,
    Verdict,
    judge_by_rules,
)
from memoryd.llm.base import LLMProvider

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
    try:
        _judge_each(job)
    finally:
        forget_texts()


def _judge_each(job: SupersedeJob) -> None:
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
