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

This module keeps the import path callers use; the code lives in `supersede_names` (the
lexicon and name checks), `supersede_patterns` (replacement wording), `supersede_rules` (the
rules, verdicts and tiers), `supersede_pairs` (judging pairs, rules then LLM),
`supersede_graph` (pairs and decisions in the graph) and `supersede_kept` (what `record`'s
judging keeps of the graph between records).
"""

from __future__ import annotations

from memoryd.governance.supersede_graph import (
    SupersedeAction,
    automatic,
    candidates,
    current_decision,
    decide,
    find_pairs,
    find_pairs_batch,
    find_pairs_many,
    find_pairs_unwritten,
    new_decisions,
    pair_of,
    with_decisions,
)
from memoryd.governance.supersede_kept import JUDGED_TYPES
from memoryd.governance.supersede_names import (
    CHOICE_TYPES,
    CODE_KIND,
    GRAPH_CHOICE_TYPES,
    RARE_FROM,
    SINGLE_VALUED_KINDS,
    Name,
    code_name,
    name_of,
    names_in,
    new_of,
    states_value,
    word_name,
)
from memoryd.governance.supersede_pairs import (
    MAX_AUTOMATIC,
    SESSION_UNKNOWN_CAP,
    Pair,
    SupersedeJob,
    judge_pairs,
    judge_with_llm,
    limit_fan_out,
    needs_llm,
    outcome_counts,
    pair_texts,
    precision_recall,
)
from memoryd.governance.supersede_patterns import (
    Transition,
    asserts,
    components,
    mentions,
    subject_before,
    transitions,
)
from memoryd.governance.supersede_rules import (
    ADOPTS_DECLINED,
    EXPLICIT,
    FAN_OUT,
    HEDGED,
    NO_LONGER,
    PARTIAL,
    RETIRES,
    RULES_VERSION,
    SINGLE_VALUED,
    STATUS,
    STATUS_JUDGE,
    SWITCH_TO_SAME_KIND,
    WENT_BACK,
    Tiers,
    Verdict,
    judge_by_rules,
)

__all__ = [
    "ADOPTS_DECLINED",
    "CHOICE_TYPES",
    "CODE_KIND",
    "EXPLICIT",
    "FAN_OUT",
    "GRAPH_CHOICE_TYPES",
    "HEDGED",
    "JUDGED_TYPES",
    "MAX_AUTOMATIC",
    "NO_LONGER",
    "PARTIAL",
    "RARE_FROM",
    "RETIRES",
    "RULES_VERSION",
    "SESSION_UNKNOWN_CAP",
    "SINGLE_VALUED",
    "SINGLE_VALUED_KINDS",
    "STATUS",
    "STATUS_JUDGE",
    "SWITCH_TO_SAME_KIND",
    "WENT_BACK",
    "Name",
    "Pair",
    "SupersedeAction",
    "SupersedeJob",
    "Tiers",
    "Transition",
    "Verdict",
    "asserts",
    "automatic",
    "candidates",
    "code_name",
    "components",
    "current_decision",
    "decide",
    "find_pairs",
    "find_pairs_batch",
    "find_pairs_many",
    "find_pairs_unwritten",
    "judge_by_rules",
    "judge_pairs",
    "judge_with_llm",
    "limit_fan_out",
    "mentions",
    "name_of",
    "names_in",
    "needs_llm",
    "new_decisions",
    "new_of",
    "outcome_counts",
    "pair_of",
    "pair_texts",
    "precision_recall",
    "states_value",
    "subject_before",
    "transitions",
    "with_decisions",
    "word_name",
]
