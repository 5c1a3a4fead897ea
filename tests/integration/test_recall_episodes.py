"""Recall over conversations: neighbouring turns share a hit's score, titles name the subject."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memoryd import recall as recall_rules
from memoryd.extraction.pipeline import load_hyponyms
from memoryd.models import DecayState, EntityType, MemoryDraft, MemoryType
from memoryd.recall.fusion import evidence_fusion
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
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


def near(
    index: SearchIndex, second: int, exclude: str, per_side: int = 1
) -> tuple[list[str], list[str]]:
    """The session turns of `SCOPE` next to `second`, within half an hour each side."""
    return index.near_in_time(
        scope_hash=SCOPE,
        type=MemoryType.SESSION,
        at=START + timedelta(seconds=second),
        window=timedelta(minutes=30),
        exclude=exclude,
        per_side=per_side,
    )


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
    assert near(index, 4, "t4", per_side=2) == (["t3", "t2"], ["t5", "t6"])
    assert near(index, 0, "t0") == ([], ["t1"])


@pytest.mark.parametrize("order", [[3, 0, 5, 1, 4, 2], [2, 4, 1, 5, 0, 3]])
def test_turns_of_one_instant_are_neighbours_in_slug_order_whatever_the_write_order(
    index: SearchIndex, order: list[int]
) -> None:
    """Captures written in one second (a bulk import, a replay) are neighbours by slug, as
    the indexed context places them: the engine's order of ties is the order of writing, which
    a rebuilt index or a granted view does not repeat."""
    for i in order:  # one write each: the engine keeps ties in write order
        index.upsert([turn(f"t{i}", 0)])
    index.upsert([turn("later", 1)])
    assert near(index, 0, "t2", per_side=2) == (["t1", "t0"], ["t3", "t4"])
    assert near(index, 0, "t5", per_side=2) == (["t4", "t3"], ["later"])


def test_titles_naming_matches_query_words_as_stemmed(index: SearchIndex) -> None:
    titles = {"a": "Caroline (D1:3)", "b": "Melanie (D1:4)", "c": "Deploying the API"}
    named = index.titles_naming("What did Caroline paint?", titles, weights={}, names=["Caroline"])
    assert named == {"a": 1.0}
    assert index.titles_naming("how do we deploy", titles, weights={}) == {"c": 1.0}
    assert index.titles_naming("what is it", titles, weights={}) == {}


def test_a_title_names_its_share_of_the_query(index: SearchIndex) -> None:
    """A common word in a title names little of the query; a rare one or a name, most."""
    index.upsert(
        [turn(f"use{i}", i, title=f"note {i}", body=f"we use tool {i} here") for i in range(6)]
        + [turn("db", 9, title="storage", body="PostgreSQL holds the databases")]
    )
    titles = {"pnpm": "Use pnpm, never npm", "pg": "Put PgBouncer in front of PostgreSQL"}
    query = "which databases do we use"
    weights = index.local_bm25(query, scope_hashes=[SCOPE]).shares
    shares = index.titles_naming(query, titles, weights=weights)
    assert set(shares) == {"pnpm"}
    assert 0 < shares["pnpm"] < 0.4  # "use" is in 6 of 7 bodies, "databases" in one
    named = index.titles_naming(query, titles, weights=weights, names=["PostgreSQL"])
    assert named["pg"] == 1.0
    assert named["pnpm"] < 0.4
    # a capitalised stop word ("I") names nothing
    mine = {"tabs": "I prefer tabs", "other": "Spaces in YAML"}
    said = index.titles_naming("what did I say about spaces", mine, weights={}, names=["I"])
    assert set(said) == {"other"}


def test_named_words_are_capitalised_but_not_sentence_openers() -> None:
    assert recall_rules.named_words("What did Caroline paint? Did Mel see it?") == [
        "Caroline",
        "Mel",
    ]
    assert recall_rules.named_words("which databases do we use") == []


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
    fused = evidence_fusion(pool, ["bm25", "context"])
    assert sorted(fused, key=lambda s: -fused[s]) == ["hit", "reply", "weak"]
    assert recall_rules.ranking(pool, "bm25", "context") == ["hit", "reply", "weak"]


def test_title_bonus_in_adjust() -> None:
    now = START
    pool = {"plain": recall_rules.Candidate("plain", score=1.0)}
    pool["named"] = recall_rules.Candidate("named", score=0.6)
    facts = {
        slug: recall_rules.MemoryFacts(
            MemoryType.SESSION, DecayState.ALIVE, START, title_share=float(slug == "named")
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
    reply = say(svc, project, "Ann", "Down by the sea, and I love it there!", 2)
    for i in range(3, 9):
        say(svc, project, "Bob", f"Filler number {i} about lunch plans.", i)
    result = svc.recall("which city to move to", scope=project, k=5)
    slugs = [h.slug for h in result.hits]
    assert set(slugs[:2]) == {ask, reply}  # the question and its answer lead
    replied = next(h for h in result.hits if h.slug == reply)
    # Found twice over: the text stage reads the question as the reply's context (a text
    # match at a low weight), and the question's score spreads to it.
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


def test_a_kind_word_finds_the_entities_of_that_kind(svc: MemoryService, project: Path) -> None:
    """ "Which cities…" reaches the turns that name a city, though none says "city"."""
    rome = say(svc, project, "Jon", "Took a short trip last week to Rome to clear my mind.", 0)
    for i in range(1, 6):
        say(svc, project, "Gina", f"Filler number {i} about lunch plans.", 100 * i)
    result = svc.recall("Which cities has Jon visited?", scope=project, k=3)
    assert result.hits[0].slug == rome
    assert "kind" in result.stages
    assert "kind" in result.hits[0].stages
    assert "cities → Rome → memory" in result.hits[0].paths


def test_a_city_answers_for_its_country_below_a_country(svc: MemoryService, project: Path) -> None:
    city = say(svc, project, "Deb", "Three years ago I was in Rio de Janeiro.", 0)
    country = say(svc, project, "Deb", "Three years ago I was in Thailand.", 100)
    result = svc.recall("Which countries has Deb been to?", scope=project, k=2)
    assert [h.slug for h in result.hits] == [country, city]
    assert "countries → Rio de Janeiro → memory" in result.hits[1].paths


def note(svc: MemoryService, project: Path, type_: MemoryType, title: str, body: str) -> str:
    draft = MemoryDraft(type=type_, title=title, body=body, scope_path=project)
    return svc.record(draft).slug


def test_a_kind_of_tool_is_recalled_by_its_kind(svc: MemoryService, project: Path) -> None:
    tried = note(
        svc,
        project,
        MemoryType.DECISION,
        "Storage for the queue",
        "We moved the job queue from Redis to PostgreSQL last week.",
    )
    note(svc, project, MemoryType.FACT, "Lint setup", "The repo is linted with ruff in CI.")
    hits = svc.recall("which databases have we tried", scope=project).hits
    assert [h.slug for h in hits] == [tried]
    assert "kind" in hits[0].stages


def test_a_title_naming_an_entity_of_the_kind_outranks_a_title_sharing_a_word(
    svc: MemoryService, project: Path
) -> None:
    """ "which databases do we use": the memories about databases come before "Use pnpm",
    whose title holds only the common word "use"."""

    def write(title: str, body: str, type_: MemoryType = MemoryType.PREFERENCE) -> str:
        return note(svc, project, type_, title, body)

    pnpm = write("Use pnpm, never npm or yarn", "We use pnpm for every package; npm is slow.")
    write("Use uv and ruff", "We use uv to install and ruff to lint.")
    write("Use conventional commits", "We use feat: and fix: prefixes.")
    pg = write(
        "Put PgBouncer in front of PostgreSQL",
        "Transaction mode, so the web workers share forty connections.",
        MemoryType.DECISION,
    )
    cache = write(
        "Sessions live in Redis",
        "Each login writes its session there with a one-day expiry.",
        MemoryType.FACT,
    )
    hits = svc.recall("which databases do we use", scope=project, k=5, track=False).hits
    slugs = [h.slug for h in hits]
    assert set(slugs[:2]) == {pg, cache}
    assert slugs.index(pnpm) > 1


def test_kind_words_and_kinds() -> None:
    assert recall_rules.kind_words("Which cities and countries?") == {
        "cities": (EntityType.PLACE, "city"),
        "countries": (EntityType.PLACE, "country"),
    }
    assert recall_rules.kind_words("what did we decide") == {}
    assert recall_rules.kind_words("which message brokers do we run") == {
        "brokers": (EntityType.TOOL, "message-broker")
    }


def test_turn_shapes_read_questions_and_length() -> None:
    """A turn asks when its text ends with a question, an attachment note after it aside; a
    turn longer than the candidates' median weighs more (BM25 favours short turns)."""
    shapes = recall_rules.turn_shapes(
        {
            "asks": "Bob: Do you paint too? [shares a photo: a lake]",
            "thanks-and-asks": "Bob: Thanks, Mel! Love it. Do you paint too?",
            "tells-and-asks": "Maria: Been busy at the shelter and keeping fit. Just started"
            " doing aerial yoga, it's great. Have you tried any other cool classes?",
            "tells": "Ann: Here is the painting we did.",
            "short": "Ann: Painting!",
            "long": "Ann: Here is the painting of a sunset over the lake we did last weekend.",
        }
    )
    assert shapes["asks"].asks
    assert shapes["asks"].words == 10
    assert shapes["thanks-and-asks"].asks
    assert not shapes["tells-and-asks"].asks
    assert not shapes["tells"].asks
    assert shapes["short"].length_factor < shapes["tells"].length_factor
    assert shapes["tells"].length_factor < shapes["long"].length_factor
    low, high = recall_rules.LENGTH_FACTOR_RANGE
    assert all(low <= shape.length_factor <= high for shape in shapes.values())


def test_a_question_counts_less_in_the_text_ranking_only() -> None:
    shapes = recall_rules.turn_shapes({"asks": "Do you paint?", "tells": "We paint."})
    pool = recall_rules.CandidatePool()
    pool.at("asks").add("bm25", 10.0)
    pool.at("tells").add("bm25", 9.0)
    pool.at("asks-too").add("entity", 2.0)
    pool.at("tells-too").add("entity", 1.0)
    for slug in pool:
        pool[slug].shape = shapes[slug.removesuffix("-too")]
    assert recall_rules.ranking(pool, "bm25", "context") == ["tells", "asks"]
    assert recall_rules.ranking(pool, "entity") == ["asks-too", "tells-too"]


def test_adjust_favours_the_longer_turn() -> None:
    shapes = recall_rules.turn_shapes({"short": "Painting!", "long": " ".join(["word"] * 30)})
    pool = {slug: recall_rules.Candidate(slug, score=1.0, shape=shapes[slug]) for slug in shapes}
    facts = {
        slug: recall_rules.MemoryFacts(MemoryType.SESSION, DecayState.ALIVE, START) for slug in pool
    }
    assert [c.slug for c in recall_rules.adjust(pool, facts, {}, START)] == ["long", "short"]


def test_the_kind_stage_weighs_rarity_in_the_searched_scope(
    svc: MemoryService, project: Path, tmp_path: Path
) -> None:
    """A city named once here outranks one named twice here, however often another project
    names the first."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for i in range(5):
        say(svc, elsewhere, "Eve", f"Paris again, day {i}.", 10 * i)
    paris = say(svc, project, "Jon", "A week in Paris, trip 0.", 0)
    rome = [say(svc, project, "Jon", f"A week in Rome, trip {i}.", 100 * (i + 1)) for i in (1, 2)]
    hits = svc.recall("which cities", scope=project, k=3, track=False).hits
    assert hits[0].slug == paris
    assert {h.slug for h in hits} == {paris, *rome}


# --- a question asking for a kind of everyday thing -----------------------------------------

KINDS = {"sport": ("basketball", "surfing", "tennis"), "board game": ("chess", "go"), "car": ()}


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("What sports does John like besides basketball?", "sport"),
        ("Which board games has Nate played?", "board game"),
        ("What kind of cars does Dave like the most?", "car"),
        ("what sport", "sport"),
        ("What does John do to relax?", None),  # no noun after "what"
        ("What Caroline said about sports", None),  # a name, not a kind
        ("What is his favourite sport?", None),
        ("Where did he surf?", None),
    ],
)
def test_asked_kind(query: str, kind: str | None) -> None:
    assert recall_rules.asked_kind(query, KINDS) == kind


def test_shipped_kinds_are_everyday_kinds_with_their_instances() -> None:
    kinds = load_hyponyms()
    assert 2_000 <= len(kinds) <= 6_000
    assert {"surfing", "basketball", "tennis"} <= set(kinds["sport"])
    assert {"chess", "checkers"} <= set(kinds["board game"])
    assert {"violin", "guitar", "piano"} <= set(kinds["musical instrument"])
    assert "class" not in kinds  # a grammatical category first: not an everyday kind
    assert "food" not in kinds  # too broad to say what a question wants
    assert all(0 < len(words) <= 300 for words in kinds.values())
    assert all(w.islower() and " " not in w for words in kinds.values() for w in words)


def test_search_expansion_adds_words_at_their_weight(index: SearchIndex) -> None:
    index.upsert(
        [
            turn("surf", 0, body="we went surfing all summer"),
            turn("sport", 1, body="the sport club meets on friday"),
            turn("other", 2, body="lunch was good"),
        ]
    )
    plain = index.search("which sport", explain=False)
    assert [h.slug for h in plain] == ["sport"]
    expanded = index.search("which sport", explain=False, expansion={"surfing": 0.3, "tennis": 0.3})
    assert [h.slug for h in expanded] == ["sport", "surf"]
    assert expanded[1].score < expanded[0].score
    assert index.words_held("They surfed and played chess.", ["surfing", "chess", "go"]) == [
        "surfing",
        "chess",
    ]


def test_a_kind_question_finds_its_instances(svc: MemoryService, project: Path) -> None:
    """ "What sports …" reaches the turn about surfing, though it never says "sport"."""
    surf = say(svc, project, "John", "Had an awesome summer surfing with my friends.", 0)
    for i in range(1, 6):
        say(svc, project, "Tim", f"Filler number {i} about lunch plans.", 100 * i)
    hits = svc.recall("What sports does John like?", scope=project, k=3, track=False).hits
    assert hits[0].slug == surf
    assert hits[0].paths[0] == "sport → surfing → memory"


def test_a_crowded_instant_is_read_whole_and_the_side_goes_on_past_it(index: SearchIndex) -> None:
    """Eight turns of one second around the asking turn: the earlier side takes none of the
    ones after it in slug order, and goes on to the turns of earlier seconds."""
    index.upsert([turn(f"a{i}", 5) for i in range(8)] + [turn("o1", 3), turn("o2", 4)])
    index.upsert([turn("n1", 6)])
    assert near(index, 5, "a0", per_side=2) == (["o2", "o1"], ["a1", "a2"])
    assert near(index, 5, "a7", per_side=3) == (["a6", "a5", "a4"], ["n1"])
    assert near(index, 5, "a3", per_side=9) == (
        ["a2", "a1", "a0", "o2", "o1"],
        ["a4", "a5", "a6", "a7", "n1"],
    )
