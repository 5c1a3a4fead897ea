"""Recall over conversations: neighbouring turns share a hit's score, titles name the subject."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memoryd import recall as recall_rules
from memoryd.models import DecayState, MemoryDraft, MemoryType
from memoryd.search.index import SearchDoc, SearchIndex
from memoryd.service import MemoryService

SCOPE = "aaaaaaaaaaaa"
START = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def turn(slug: str, second: int, *, scope: str = SCOPE, **fields: object) -> SearchDoc:
    values: dict[str, object] = {
        "slug": slug,
        "scope_hash": scope,
        "type": MemoryType.SESSION,
        "decay_state": DecayState.ALIVE,
        "title": slug,
        "body": f"turn {slug}",
        "created_at": START + timedelta(seconds=second),
    }
    values.update(fields)
    return SearchDoc.model_validate(values)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[SearchIndex]:
    with SearchIndex.open(tmp_path / "search") as opened:
        yield opened


def test_near_in_time_gives_the_nearest_turns_on_each_side(index: SearchIndex) -> None:
    index.upsert(
        [
            *(turn(f"t{i}", i) for i in range(8)),
            turn("other-scope", 3, scope="bbbbbbbbbbbb"),
            turn("decision", 4, type=MemoryType.DECISION),
            turn("forgotten", 5, decay_state=DecayState.FORGOTTEN),
            turn("far", 4000),
        ]
    )
    near = index.near_in_time(
        scope_hash=SCOPE,
        type=MemoryType.SESSION,
        at=START + timedelta(seconds=4),
        window=timedelta(minutes=30),
        exclude="t4",
        per_side=2,
    )
    assert near == (["t3", "t2"], ["t5", "t6"])
    first = index.near_in_time(
        scope_hash=SCOPE,
        type=MemoryType.SESSION,
        at=START,
        window=timedelta(minutes=30),
        exclude="t0",
    )
    assert first == ([], ["t1"])


def test_titles_naming_matches_query_words_as_stemmed(index: SearchIndex) -> None:
    titles = {"a": "Caroline (D1:3)", "b": "Melanie (D1:4)", "c": "Deploying the API"}
    assert index.titles_naming("What did Caroline paint?", titles) == {"a"}
    assert index.titles_naming("how do we deploy", titles) == {"c"}
    assert index.titles_naming("what is it", titles) == set()


def test_title_boost_replaces_the_title_weight(index: SearchIndex) -> None:
    index.upsert(
        [
            turn("in-title", 0, title="postgres choice", body="we picked it for storage"),
            turn("in-body", 1, title="storage", body="we use postgres"),
        ]
    )
    assert index.search("postgres")[0].slug == "in-title"
    weightless = index.search("postgres", title_boost=0.0)
    assert weightless[0].slug == "in-body"


def test_context_ranks_with_the_text_stage() -> None:
    pool = recall_rules.CandidatePool()
    pool.at("hit").add("bm25", 10.0)
    pool.at("weak").add("bm25", 2.0)
    pool.at("reply").add("context", 5.0)
    fused = pool.fuse(["bm25", "context"])
    assert sorted(fused, key=lambda s: -fused[s]) == ["hit", "reply", "weak"]
    assert recall_rules.ranking(pool, "bm25", "context") == ["hit", "reply", "weak"]


def test_title_bonus_in_adjust() -> None:
    now = START
    pool = {"plain": recall_rules.Candidate("plain", score=1.0)}
    pool["named"] = recall_rules.Candidate("named", score=0.6)
    facts = {
        slug: recall_rules.MemoryFacts(
            MemoryType.SESSION, DecayState.ALIVE, START, title_named=slug == "named"
        )
        for slug in pool
    }
    ranked = recall_rules.adjust(pool, facts, {}, now)
    assert [c.slug for c in ranked] == ["named", "plain"]


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


def test_the_reply_to_a_matching_turn_is_recalled(svc: MemoryService, project: Path) -> None:
    """The answer to a question often shares no word with it: it is the next turn."""
    say(svc, project, "Ann", "Unrelated chat about the weather today.", 0)
    ask = say(svc, project, "Bob", "Which city did you move to last spring?", 1)
    reply = say(svc, project, "Ann", "Lisbon, and I love it there!", 2)
    for i in range(3, 9):
        say(svc, project, "Bob", f"Filler number {i} about lunch plans.", i)
    result = svc.recall("which city to move to", scope=project, k=5)
    slugs = [h.slug for h in result.hits]
    assert slugs[0] == ask
    assert reply in slugs
    replied = next(h for h in result.hits if h.slug == reply)
    # Found twice over: the index holds the question as the reply's context (a text match at
    # a low weight), and the question's score spreads to it.
    assert replied.stages == ["bm25", "context"]
    assert f"next to {ask}" in replied.paths
    assert "context" in result.stages


def test_a_title_naming_the_query_ranks_first(svc: MemoryService, project: Path) -> None:
    other = say(svc, project, "Bob", "I painted a sunset with my kids, painting is fun.", 0)
    for i in range(1, 6):
        say(svc, project, "Bob", f"Filler number {i} about lunch plans.", 100 * i)
    named = say(svc, project, "Ann", "I painted a lake.", 1000)
    slugs = [h.slug for h in svc.recall("What did Ann paint?", scope=project).hits]
    assert slugs.index(named) < slugs.index(other)
