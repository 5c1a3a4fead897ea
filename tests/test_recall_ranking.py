"""Recall's ranking mechanisms: how turns lend context, how scores are calibrated, which
memory is current, and what an explanation shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memoryd.models import MemoryDraft, MemoryType
from memoryd.recall.conversation import CONTEXT_SPREAD, TELLING_SPREAD
from memoryd.service import MemoryService

START = datetime(2025, 3, 4, 10, 0, 0, tzinfo=UTC)


def say(svc: MemoryService, project: Path, speaker: str, text: str, second: int) -> str:
    draft = MemoryDraft(
        type=MemoryType.SESSION,
        title=speaker,
        body=f"{speaker}: {text}",
        scope_path=project,
        created_at=START + timedelta(seconds=second),
        allow_duplicate=True,
    )
    return svc.record(draft).slug


def test_a_turn_that_tells_lends_its_neighbours_less_than_a_question(
    svc: MemoryService, project: Path
) -> None:
    """The reply to a question answers it; the turn after a statement only follows it."""
    day = 86_400
    asks = say(svc, project, "Bob", "Which harbour town did you sail to?", 0)
    answer = say(svc, project, "Ann", "Down the coast, and it was lovely!", 1)
    tells = say(svc, project, "Bob", "We sailed to a harbour town, my favourite trip.", day)
    follows = say(svc, project, "Ann", "Sounds great, glad you had fun!", day + 1)
    hits = {h.slug: h for h in svc.recall("harbour town sail", scope=project, k=10).hits}
    assert {asks, answer, tells, follows} <= set(hits)

    def lent(neighbour: str, seed: str) -> float:
        """The context a neighbour got, per unit of its seed's text relevance."""
        seed_hit = hits[seed]
        relevance = seed_hit.factors["bm25"] / seed_hit.factors.get("asking", 1.0)
        return hits[neighbour].factors["context"] / relevance

    assert lent(answer, asks) == pytest.approx(CONTEXT_SPREAD[0], rel=0.02)
    assert lent(follows, tells) == pytest.approx(CONTEXT_SPREAD[0] * TELLING_SPREAD, rel=0.02)
