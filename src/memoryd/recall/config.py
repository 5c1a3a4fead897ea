"""Which recall stages run, and the score below which a hit is not worth injecting."""

from __future__ import annotations

from dataclasses import dataclass, field

STAGES = frozenset(
    {"answer", "text", "expansion", "entity", "graph", "kind", "context", "vector", "current"}
)
"""The switchable stages: `text` (BM25), `expansion` (words for the instances of a kind the
question asks for, in the text stage), `entity` (query → entity → memory), `graph` (one more
hop through related entities), `kind` (entities of a kind the query names), `context`
(conversation turns next to a text hit), `vector` (when an embedding index is configured),
`current` (for a question about what is current, of close memories about the same thing
the newer first), `answer` (for a question asking for a typed value — a version, a port, an
address — the memories stating none score less, `recall.answer`)."""
DEFAULT_STAGES = STAGES - {"graph"}
"""Every stage but `graph` runs by default; `current` only reorders for a question asking what
is current (`adjustment.asks_for_current`).

`graph` (one more hop, through the relations between entities) is opt-in
(`RecallConfig(stages=DEFAULT_STAGES | {"graph"})`): switched on, it changed no question on
any set measured (2026-12-04, bench/RESULTS.md): DevMemBench record and capture (MRR 0.930 /
0.927 either way), LoCoMo (hit@5 0.770 either way, 0 of 1,536 questions), the decision
records and the entity question set (tests/data/recall/aliases.yaml). A stage runs by default
only where it shows a gain (DESIGN §6)."""


INJECT_MIN_SCORE = 0.12
"""The relevance (`RecallHit.score`, 0 to 1) below which `inject` adds nothing to an agent's
prompt. A score is the idf-weighted, saturated share of the query a memory holds, times how
much the query names (`text.query_confidence`): a memory holding once each word of a query
that names two rare things scores about 0.2, one holding half of it about 0.1. Measured on
DevMemBench at 0.12 (silent on abstention questions / injects on answerable ones): record
0.60 / 0.91, capture 0.68 / 0.93, abstention AUC 0.91 / 0.93, since a project's own name no
longer counts as query content (before: 0.48 / 0.94 and 0.52 / 0.91, AUC 0.87 / 0.89). On
text evidence alone no threshold reaches silent 0.8 with injects 0.9 on the record path
(0.13: 0.76 / 0.89; capture 0.80 / 0.91): the threshold favours injecting for answerable
questions. Measured as `inject` decides (the best of the hits it gets, `context.choose`):
record 0.60 / 0.914, capture 0.64 / 0.943 at 0.12; record 0.80 / 0.874 and capture
0.80 / 0.891 at the lowest thresholds silent on 80% (0.135, 0.14).

With the answer stage (`recall.answer`: a question asking for a typed value — a version, a
port, an address — finds less in a memory stating none; a session holding the head of a
"what <modifier> <head>" frame but none of its modifiers is about another kind of it):
record 0.72 / 0.914, capture 0.76 / 0.943 at 0.12, AUC 0.932 / 0.943. With light words
(`search.words.LIGHT_WORDS`: "use", "used" … rank but are no evidence of an answer, and
leave the query's weight): record 0.84 / 0.914, capture 0.88 / 0.937, AUC 0.940 / 0.944;
silent on 80% from 0.1145 / 0.1128, injecting there for 0.937 / 0.949, so 0.12 meets both
targets with a margin of a question or more either side (0.125: 0.88 / 0.903, 0.88 / 0.926).
Tried and dropped there: the head word counting only as the adjacent compound ("cloud
provider" whole): the answerable questions' gold sessions hold their frame's compound in 4 of
32 ("What web framework …" is answered by "FastAPI"); the modifier rule counted for
conversation turns too (LoCoMo hit@5 0.774 → 0.773, multi-hop all@10 0.309 → 0.305: a turn
names the instance, not the kind); the reverse, a modifier held without its head (gold
sessions do that in 23 of 45 cases: "What payment provider …" is answered by "Stripe
payments"); light words dropped from the ranking as well as the relevance (the same inject
figures, but hit@1 0.874 → 0.869 / 0.863 and LoCoMo hit@5 0.774 → 0.773). Still injecting
at 0.12: "Is Kubernetes or any container orchestration beyond Docker Compose used?" (S01
says Docker Compose orchestrates the containers), "What browsers are supported …" (a
session on CORS says "browser"), "What load balancer configuration is used beyond nginx …",
and on record "What is the developer's preferred IDE or code editor?".

Tried on DevMemBench and dropped (silent-0.8 operating point, record path, from 0.87): the
share of the query weight no memory of the scope holds, alone (0.80) or as a factor (0.80);
that share weighed at the words' true idf (0.86); idf squared or cubed in the shares (0.89,
0.90, AUC 0.906 / 0.884); the top hit's lead over the next hits (0.86-0.90 at AUC
0.89-0.91, by a weight fitted on the record path); the union of the top hits' coverage
(0.79-0.83); the query's weight in absolute idf rather than in units of a word held once
(0.85); adjacent query words counted as a phrase (0.86);
the best single message's share of the query (0.85); requiring the top hit to hold a given
share of the query besides the score (no gain); a larger `QUERY_PRIOR` (3-4: 0.89, AUC 0.92,
a constant fitted to this set). The abstention questions that then still injected asked for
an attribute of something the project did discuss ("What PostgreSQL version …", "What cloud
provider is it deployed on?" against Stripe's "payment provider": the answer stage's cases),
and the answerable ones below it are syntheses across sessions or paraphrases
("containerized" for Docker)."""


@dataclass(frozen=True)
class RecallConfig:
    """What a recall runs; the benches turn stages off one at a time (the ablation)."""

    stages: frozenset[str] = field(default_factory=lambda: DEFAULT_STAGES)
    min_score: float = INJECT_MIN_SCORE

    def __post_init__(self) -> None:
        unknown = self.stages - STAGES
        if unknown:
            from memoryd.errors import InvalidInput

            raise InvalidInput(
                f"unknown recall stage(s) {', '.join(sorted(unknown))}: "
                f"use {', '.join(sorted(STAGES))}"
            )
