"""The candidates a recall gathers: each memory some stage found, with each stage's score."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from memoryd.models import DecayState, MemoryType


def rank_key(score: float, slug: str) -> tuple[float, str]:
    """Sort key of a ranked memory: best first, ties by slug. Scores are compared at 9
    decimals: the same evidence summed in another order (a view built from a snapshot or
    from the files, stores listed in another order) differs in the last bits, and the same
    data must always rank the same."""
    return -round(score, 9), slug


@dataclass(frozen=True)
class Calibration:
    """How an embedder's best-passage cosine counts as evidence (`dense_relevance`)."""

    floor: float
    """A question's cosine with a passage that does not answer it is mostly below this: no
    evidence (the median of such cosines)."""
    full: float
    """A cosine from here on is as strong as dense evidence gets."""
    in_relevance: bool
    """Whether the evidence also counts in the calibrated score (`RecallHit.score`, what
    `inject` thresholds), or only reorders hits."""
    turns: bool = True
    """Whether it counts for a conversation turn (`conversation.is_turn`), or only for
    memories long enough that an average of their words is stable."""


class VectorStage(Protocol):
    """An optional embedding index; recall runs without one."""

    @property
    def calibration(self) -> Calibration: ...

    @property
    def cheap(self) -> bool: ...

    def search(
        self, query: str, *, scope_hashes: Sequence[str] | None, limit: int
    ) -> list[tuple[str, float]]: ...

    def rescore(
        self, query: str, slugs: Sequence[str], *, scope_hashes: Sequence[str] | None
    ) -> list[tuple[str, float]]: ...


@dataclass
class Candidate:
    slug: str
    stage_scores: dict[str, float] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    score: float = 0.0
    superseded_by: str | None = None
    relevance: float = 0.0
    """How well its text answers the query, 0 to 1 (`LocalScore.relevance`)."""
    text_evidence: float | None = None
    """Its text's share of the query without light words (`LocalScore.evidence`): what the
    calibrated relevance counts of the text stage, which ranks on `relevance`."""
    demotion: float = 1.0
    whole_session: bool = False
    entered_kind: bool = False
    """A whole session where an entity of the kind the question asks for entered its scope:
    the kind stage's evidence counts for it (`pipeline.kind_stage`)."""
    matched: frozenset[str] = frozenset()
    """The query's words its text holds (as the index analyses them)."""
    entities: set[str] = field(default_factory=set)
    """The entities the query names that it mentions (the entity stage's links to it)."""
    stale: bool = False
    """A supersede edge about the query's subject demoted it (`adjustment.supersede_rule`)."""
    novel: dict[str, float] = field(default_factory=dict)
    """stage → its evidence for the query words this memory's text does not hold: what the
    stage adds to the calibrated relevance (a word the text matched is counted once)."""
    path_stages: dict[str, str] = field(default_factory=dict)
    """path → the stage that found it."""
    factors: dict[str, float] = field(default_factory=dict)
    """Every factor that moved its score: each stage's contribution to the fused score,
    then each adjustment's multiplier (title, length, long-term, recency, dim, superseded),
    and `query weight`, how far the query's weight lets its share count in the score
    (`text.query_confidence`)."""

    def scale(self, factor: str, by: float) -> None:
        """Multiply the score by a named factor, kept for the explanation when it moves it."""
        self.score *= by
        if by != 1.0:
            self.factors[factor] = round(self.factors.get(factor, 1.0) * by, 4)

    """A captured or recorded whole session (many turns), not one turn or one note."""
    """The product of the demoting factors the adjustment applied (superseded, dim)."""
    shape: TurnShape | None = None
    """For a session turn: how it reads (`turn_shapes`), which weighs its score."""

    def add(
        self, stage: str, score: float, path: str | None = None, *, novel: float | None = None
    ) -> None:
        """Count a stage's score here; `novel`, the part of it standing for query words the
        memory's text lacks (the whole score unless told)."""
        self.stage_scores[stage] = self.stage_scores.get(stage, 0.0) + score
        self.novel[stage] = self.novel.get(stage, 0.0) + (score if novel is None else novel)
        if path:
            self.explain(path)
            self.path_stages.setdefault(path, stage)

    def drop_stage(self, stage: str) -> None:
        """Forget what a stage found here (fenced from this memory's shape), paths too."""
        self.stage_scores.pop(stage, None)
        self.novel.pop(stage, None)
        self.paths[:] = [p for p in self.paths if self.path_stages.get(p) != stage]

    def explain(self, path: str, *, first: bool = False) -> None:
        """Say how the memory was reached (at most five ways; `first` for the telling one)."""
        if path in self.paths:
            return
        if first:
            self.paths[:] = [path, *self.paths][:5]
        elif len(self.paths) < 5:
            self.paths.append(path)


class CandidatePool(dict[str, Candidate]):
    """Every memory some stage found, with each stage's raw score."""

    def at(self, slug: str) -> Candidate:
        """The slug's candidate, made on its first mention only (`setdefault` would build a
        `Candidate` and its six containers for every mention of one already here)."""
        found = self.get(slug)
        if found is None:
            found = self[slug] = Candidate(slug)
        return found

    def has_stage(self, stage: str) -> bool:
        return any(stage in c.stage_scores for c in self.values())


@dataclass(frozen=True)
class MemoryFacts:
    """What the adjustment step needs to know of a candidate."""

    type: MemoryType
    decay_state: DecayState
    created_at: datetime
    title_share: float = 0.0
    """How much of the query the memory's title names, 0 to 1 (`SearchIndex.titles_naming`)."""


@dataclass(frozen=True)
class TurnShape:
    """How a session turn reads: its length against the other candidates' median, and
    whether it ends by asking."""

    words: int
    asks: bool
    length_factor: float = 1.0


class NormaliseFn(Protocol):
    def __call__(self, name: str) -> str: ...
