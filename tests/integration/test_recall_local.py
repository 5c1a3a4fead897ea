"""Recall's text stage ranks a scope on that scope's live memories alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memoryd.models import DecayState, MemoryDraft, MemoryType
from memoryd.recall import Candidate, MemoryFacts, RecallConfig
from memoryd.recall.adjustment import RECENCY_BONUS, adjust, asks_for_current, current_first
from memoryd.recall.config import INJECT_MIN_SCORE
from memoryd.recall.conversation import is_turn
from memoryd.recall.entities import named_words
from memoryd.recall.fusion import evidence_fusion
from memoryd.service import MemoryService

A_NOTES = [
    ("Cache layer", "We put Redis in front of PostgreSQL for the product catalogue cache."),
    ("Cache eviction", "Redis evicts catalogue keys after ten minutes; the cache warms on start."),
    ("Payments", "Stripe webhooks confirm the checkout; the cache is not involved."),
    ("Migrations", "Alembic runs the schema migrations before each deploy."),
]
B_NOTES = [
    (f"Other {i}", "cache cache cache catalogue redis " * (i + 1) + "unrelated words here")
    for i in range(12)
]
QUERIES = ["redis catalogue cache", "schema migrations deploy", "stripe checkout webhooks"]


def load(svc: MemoryService, project: Path, notes: list[tuple[str, str]]) -> list[str]:
    drafts = [
        MemoryDraft(type=MemoryType.FACT, title=title, body=body, scope_path=project)
        for title, body in notes
    ]
    return [m.slug for m in svc.record_many(drafts)]


def rankings(svc: MemoryService, project: Path) -> list[list[tuple[str, float]]]:
    return [
        [(h.slug, h.score) for h in svc.recall(q, scope=project, k=10, track=False).hits]
        for q in QUERIES
    ]


def test_another_project_does_not_change_a_scopes_ranking(
    svc: MemoryService, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    load(svc, a, A_NOTES)
    before = rankings(svc, a)
    assert all(ranked for ranked in before)
    load(svc, b, B_NOTES)
    assert rankings(svc, a) == before


def test_deleted_copies_never_count(svc: MemoryService, tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    slugs = load(svc, a, A_NOTES)
    before = rankings(svc, a)
    for _ in range(3):  # each rewrite leaves a deleted copy in the index until a merge
        svc.index.upsert(list(svc.index.stored(slugs).values()))
        assert rankings(svc, a) == before


def test_scores_are_relevance_between_zero_and_one(svc: MemoryService, tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    load(svc, a, A_NOTES)
    hits = svc.recall("redis catalogue cache", scope=a, k=10, track=False).hits
    assert hits
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    unrelated = svc.recall("kubernetes helm chart", scope=a, k=10, track=False).hits
    assert max((h.score for h in unrelated), default=0.0) < RecallConfig().min_score
    assert hits[0].score >= RecallConfig().min_score


def test_text_stage_alone_is_switchable(svc: MemoryService, tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    load(svc, a, A_NOTES)
    svc.recall_config = RecallConfig(stages=frozenset({"text"}))
    result = svc.recall("redis catalogue cache", scope=a, k=10, track=False)
    assert result.stages == ["bm25"]
    assert result.hits[0].title in {"Cache layer", "Cache eviction"}


def test_whole_sessions_are_not_conversation_turns() -> None:
    whole = "\n".join(f"user: step {i}\nassistant: done {i}" for i in range(5))
    assert not is_turn(MemoryType.SESSION, whole)
    assert is_turn(MemoryType.SESSION, "Caroline: I went to a support group yesterday.")
    assert not is_turn(MemoryType.FACT, "Short fact.")


def test_acronyms_are_not_names() -> None:
    assert named_words("How does the API handle a POST to Stripe?") == ["Stripe"]


def test_explanations_show_factors_and_drop_function_words(
    svc: MemoryService, tmp_path: Path
) -> None:
    a = tmp_path / "a"
    a.mkdir()
    load(svc, a, A_NOTES)
    hit = svc.recall("what is the redis catalogue cache", scope=a, k=3, track=False).hits[0]
    assert hit.factors["bm25"] > 0
    assert hit.factors["long-term"] > 1  # a fact is a long-term memory
    assert "title" in hit.factors  # "Cache layer" / "Cache eviction" name part of the query
    assert set(hit.matched_terms) <= {"redis", "catalogue", "cache"}
    assert "redis" in hit.matched_terms


def test_recall_min_score_leaves_out_weak_hits(home: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from memoryd.cli.main import app

    a = tmp_path / "a"
    a.mkdir()
    runner = CliRunner()
    for title, body in A_NOTES:
        done = runner.invoke(
            app,
            [
                "record",
                "--type",
                "fact",
                "--title",
                title,
                "--body",
                body,
                "--scope",
                str(a),
                "--home",
                str(home),
            ],
        )
        assert done.exit_code == 0, done.output
    query = ["recall", "cache checkout", "--scope", str(a), "--home", str(home), "--json"]
    every = json.loads(runner.invoke(app, query).output)["hits"]
    strong = json.loads(runner.invoke(app, [*query, "--min-score", "0.5"]).output)["hits"]
    assert every
    assert all(h["score"] >= 0.5 for h in strong)
    assert len(strong) < len(every)


SESSIONS = {
    "s-cache": [
        ("user", "Add a Redis cache in front of the product catalogue queries."),
        ("assistant", "Done: catalogue reads go through Redis with a ten minute expiry."),
    ],
    "s-migrate": [
        ("user", "Switch the schema migrations from Alembic to Aerich."),
        ("assistant", "Migrations now run with aerich upgrade before the server starts."),
    ],
    "s-stripe": [
        ("user", "Wire the Stripe webhook for checkout."),
        ("assistant", "The webhook verifies the signature and marks the order paid."),
    ],
}


def capture(home: Path, project: Path, session_id: str, turns: list[tuple[str, str]]) -> None:
    """Pipe a SessionEnd payload for a Claude Code transcript into `memoryd capture`."""
    import io

    from memoryd.capture import hook

    lines = []
    for i, (role, said) in enumerate(turns):
        text = f"{said} We ran the test suite and read the logs afterwards; all of it passed."
        content: object = text if role == "user" else [{"type": "text", "text": text}]
        lines.append(
            json.dumps(
                {
                    "type": role,
                    "sessionId": session_id,
                    "cwd": str(project),
                    "uuid": f"{session_id}-{i}",
                    "parentUuid": f"{session_id}-{i - 1}" if i else None,
                    "timestamp": f"2026-01-0{1 + len(session_id) % 5}T10:00:{i:02d}.000Z",
                    "message": {"role": role, "content": content},
                }
            )
        )
    path = project.parent / f"{session_id}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    payload = {
        "session_id": session_id,
        "transcript_path": str(path),
        "cwd": str(project),
        "hook_event_name": "SessionEnd",
    }
    hook.main(
        ["--source=claude-code", f"--home={home}"],
        stdin=io.StringIO(json.dumps(payload)),
        stdout=io.StringIO(),
    )


def test_recapture_and_enrichment_never_change_the_ranking(
    svc: MemoryService, home: Path, tmp_path: Path
) -> None:
    project = tmp_path / "work" / "shop"
    project.mkdir(parents=True)
    queries = ["redis catalogue cache", "aerich migrations", "stripe webhook checkout"]

    def ranked() -> list[list[tuple[str, float]]]:
        return [
            [(h.slug, h.score) for h in svc.recall(q, scope=project, track=False).hits]
            for q in queries
        ]

    def capture_all(extra: str) -> None:
        for session_id, turns in SESSIONS.items():
            capture(home, project, session_id, [*turns, ("user", extra)])
        svc.drain_inbox()
        svc.enrich_pending(use_llm=False)

    capture_all("Thanks.")
    first = ranked()
    assert all(first)
    for _ in range(2):  # the same sessions captured again: rewritten, re-indexed, re-enriched
        capture_all("Thanks.")
        assert ranked() == first


def _cand(slug: str, **scores: float) -> Candidate:
    cand = Candidate(slug)
    for stage, score in scores.items():
        cand.add(stage, score, f"{stage} → {slug}")
    return cand


def test_graph_evidence_cannot_outvote_a_strong_text_match() -> None:
    """Entity evidence is bounded by the share of the query its words carry (at most 1 for
    the whole query): a memory holding most of the query's weight stays first."""
    strong = _cand("strong", bm25=0.7)
    # A weak text match that also mentions the linked entity, its evidence at the most the
    # entity's words (a fifth of the query) can carry.
    linked = _cand("linked", bm25=0.3, entity=0.2, graph=0.2)
    fused = evidence_fusion({"strong": strong, "linked": linked}, ["bm25", "entity", "graph"])
    assert fused["strong"] > fused["linked"]
    assert linked.factors == {"bm25": 0.3, "entity": 0.2, "graph": 0.1}


def test_kind_evidence_does_not_count_for_whole_sessions() -> None:
    session = _cand("session", bm25=0.2, kind=0.9)
    session.whole_session = True
    note = _cand("note", bm25=0.2, kind=0.9)
    fused = evidence_fusion({"session": session, "note": note}, ["bm25", "kind"])
    assert fused["session"] == pytest.approx(0.2)
    assert fused["note"] == pytest.approx(1.1)
    assert session.stage_scores == {"bm25": 0.2}
    assert session.paths == ["bm25 → session"]  # the kind stage's path is gone too


def test_kind_evidence_counts_for_the_session_where_the_entity_entered() -> None:
    """Where an entity of the asked kind entered the scope the kind stage's evidence
    reorders, while the relevance counts only the text (the pipeline adds none as novel)."""
    entered = Candidate("entered")
    entered.add("bm25", 0.1)
    entered.add("kind", 0.6, "database → PostgreSQL → memory", novel=0.0)
    entered.whole_session = entered.entered_kind = True
    fused = evidence_fusion({"entered": entered}, ["bm25", "kind"])
    assert fused["entered"] == pytest.approx(0.7)
    assert entered.relevance == pytest.approx(0.1)
    assert entered.paths == ["database → PostgreSQL → memory"]


def test_current_first_puts_the_newer_of_near_tied_memories_first() -> None:
    old, new, other = (Candidate(s) for s in ("old", "new", "other"))
    old.score, new.score, other.score = 1.0, 0.9, 0.85
    old.matched = frozenset({"orm"})
    new.matched = frozenset({"orm", "current"})
    other.matched = frozenset({"cache"})
    when = datetime(2026, 1, 1, tzinfo=UTC)
    facts = {
        "old": MemoryFacts(MemoryType.SESSION, DecayState.ALIVE, when),
        "new": MemoryFacts(MemoryType.SESSION, DecayState.ALIVE, when + timedelta(days=5)),
        "other": MemoryFacts(MemoryType.SESSION, DecayState.ALIVE, when + timedelta(days=9)),
    }
    ranked = [old, new, other]
    shares = {"orm": 0.5, "current": 0.3, "cache": 0.2}
    current_first(ranked, facts, shares)
    # `other` is newer still but holds none of the words `old` matched: not the same thing.
    assert [c.slug for c in ranked] == ["new", "old", "other"]
    far = [Candidate("old", score=1.0, matched=old.matched), Candidate("new", score=0.5)]
    far[1].matched = new.matched
    current_first(far, facts, shares)
    assert [c.slug for c in far] == ["old", "new"]  # not near-tied: the better stays first


def test_a_titles_share_of_the_query_ignores_other_projects(
    svc: MemoryService, tmp_path: Path
) -> None:
    """The title factor weighs the query's words by the searched scope's statistics: words
    another project repeats in every memory never change what a title names here."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    load(
        svc,
        a,
        [
            ("Redis catalogue", "We keep the product catalogue in a cache for ten minutes."),
            ("Deploy order", "Each deploy runs the schema migrations first."),
            ("Checkout", "Stripe webhooks confirm the checkout."),
        ],
    )
    query = "redis catalogue deploy"

    def ranked() -> list[tuple[str, float, dict[str, float]]]:
        hits = svc.recall(query, scope=a, k=10, track=False).hits
        return [(h.slug, h.score, h.factors) for h in hits]

    before = ranked()
    assert sum("title" in factors for _, _, factors in before) == 2
    load(svc, b, [(f"Other {i}", f"redis redis catalogue catalogue, note {i}") for i in range(12)])
    assert ranked() == before


def test_the_projects_own_name_weighs_nothing_inside_it(svc: MemoryService, tmp_path: Path) -> None:
    """Every memory of a scope is about its project, said or not: a question naming the
    project asks about the rest of its words."""
    project = tmp_path / "shop-api"
    project.mkdir()
    setup, orm, _ = load(
        svc,
        project,
        [
            ("Kick-off", "We start the shop-api today: the shop-api repo, shop-api docker files."),
            ("Models", "The ORM is Tortoise; every model lives in app/models."),
            ("Cart", "Carts are kept in Redis hashes for seven days."),
        ],
    )
    hits = svc.recall("What ORM does the shop-api use?", scope=project, k=10, track=False).hits
    assert hits[0].slug == orm
    weak = {h.slug: h.score for h in hits}.get(setup, 0.0)
    # The kick-off holds only the project's name: far below what `inject` adds (the query
    # names "ORM" alone once "use" is known for a light word, so the name's sliver of it
    # weighs a little more than when "use" counted: 0.043 then, 0.056 now).
    assert weak < INJECT_MIN_SCORE / 2
    # Across scopes the name still tells projects apart.
    other = tmp_path / "blog"
    other.mkdir()
    load(svc, other, [("Shop link", "The blog links to the shop-api docs.")])
    everywhere = svc.recall("shop-api docker", k=10, track=False).hits
    assert everywhere[0].slug == setup


def test_time_words_say_when_not_what(svc: MemoryService, tmp_path: Path) -> None:
    """ "currently", "still", "original" say when the asked state holds: a memory repeating
    them is no more about the question's subject."""
    project = tmp_path / "p"
    project.mkdir()
    _, orm = load(
        svc,
        project,
        [
            ("Sprint", "Currently we are still on the current sprint; currently nothing ships."),
            ("Models", "We use Tortoise as the ORM for the models."),
        ],
    )
    hits = svc.recall("Which ORM do we currently use?", scope=project, k=10, track=False).hits
    assert [h.slug for h in hits] == [orm]
    assert "currently" not in hits[0].matched_terms


def test_recency_counts_from_the_newest_candidate_not_the_clock() -> None:
    """The same data ranks the same whenever it is asked: a memory's age is counted back
    from the newest candidate, so the newest gets the full recency factor."""
    when = datetime(2020, 1, 1, tzinfo=UTC)
    facts = {
        "old": MemoryFacts(MemoryType.SESSION, DecayState.ALIVE, when),
        "new": MemoryFacts(MemoryType.SESSION, DecayState.ALIVE, when + timedelta(days=180)),
    }

    def ranked() -> list[tuple[str, float, dict[str, float]]]:
        pool = {"old": Candidate("old", score=1.0), "new": Candidate("new", score=1.0)}
        return [(c.slug, c.score, dict(c.factors)) for c in adjust(pool, facts, {})]

    first = ranked()
    assert [slug for slug, _, _ in first] == ["new", "old"]
    assert first[0][2]["recency"] == pytest.approx(1 + RECENCY_BONUS)
    assert first[1][2]["recency"] == pytest.approx(1 + RECENCY_BONUS / 2)  # one half-life
    assert ranked() == first


def test_a_question_about_the_final_state_asks_what_is_current() -> None:
    assert asks_for_current("What is the final status of the dashboard?")
    assert asks_for_current("What is pending as of the last session?")
    assert not asks_for_current("When was Redis added?")


def test_a_sessions_opening_prompt_names_only_its_words_share_of_the_query(
    svc: MemoryService, tmp_path: Path
) -> None:
    """A whole session's title is its opening prompt, naming entities in passing: holding
    one name the query holds does not make it name the whole query."""
    project = tmp_path / "p"
    project.mkdir()
    drafts = [
        MemoryDraft(
            type=MemoryType.SESSION,
            title="Set up pytest fixtures with Redis",
            body="user: set up pytest fixtures\nassistant: conftest.py starts a Redis test "
            "container for the cart tests.\nuser: and the database?\nassistant: a "
            "PostgreSQL container per session, migrated once.",
            scope_path=project,
        ),
        MemoryDraft(
            type=MemoryType.SESSION,
            title="Rate limiting",
            body="user: add rate limiting\nassistant: slowapi keeps its counters in Redis, "
            "shared by every worker.\nuser: which limits?\nassistant: 100 requests a "
            "minute, 10 on the login route.",
            scope_path=project,
        ),
    ]
    svc.record_many(drafts)
    hits = svc.recall("How do the rate limiting workers use Redis?", scope=project, k=5).hits
    factors = {h.title: h.factors for h in hits}
    assert factors["Set up pytest fixtures with Redis"].get("title", 1.0) < 1.5
    assert hits[0].title == "Rate limiting"
