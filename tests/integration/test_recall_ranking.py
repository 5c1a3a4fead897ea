"""Recall's ranking mechanisms: how turns lend context, how scores are calibrated, which
memory is current, and what an explanation shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memoryd.models import MemoryDraft, MemoryType
from memoryd.recall import Candidate, RecallConfig
from memoryd.recall.adjustment import asks_for_current
from memoryd.recall.conversation import (
    CONTEXT_SPREAD,
    OPENING_CHARS,
    TELLING_SPREAD,
    opening_request,
)
from memoryd.recall.fusion import evidence_fusion
from memoryd.recall.kinds import headed_kinds
from memoryd.recall.text import QUERY_PRIOR, query_confidence
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


def test_a_query_that_names_more_is_more_confident() -> None:
    """The same share of a query means more when the query names more rare things."""
    assert query_confidence(0.0) == 0.0
    one, two, four = query_confidence(1.0), query_confidence(2.0), query_confidence(4.0)
    assert 0.0 < one < two < four < 1.0
    assert two == pytest.approx(2.0 / (2.0 + QUERY_PRIOR))


def test_graph_evidence_counts_in_relevance_only_for_words_the_text_lacks() -> None:
    """A memory that says "PostgreSQL" and mentions the entity PostgreSQL holds the word
    once: the entity orders it a little higher, but does not make it more relevant."""
    says = Candidate("says")
    says.add("bm25", 0.3)
    says.add("entity", 0.2, "PostgreSQL → memory", novel=0.0)
    alias = Candidate("alias")  # says "Postgres": only the link knows it is PostgreSQL
    alias.add("bm25", 0.3)
    alias.add("entity", 0.2, "PostgreSQL → memory", novel=0.2)
    fused = evidence_fusion({"says": says, "alias": alias}, ["bm25", "entity"])
    assert fused["says"] == pytest.approx(fused["alias"])
    assert says.relevance == pytest.approx(0.3)
    assert alias.relevance == pytest.approx(0.5)


def test_a_linked_word_the_text_holds_adds_no_relevance(svc: MemoryService, project: Path) -> None:
    notes = [
        ("Database", "The orders service keeps its rows in PostgreSQL with nightly dumps."),
        ("Cache", "Sessions live in Redis; the cache expires after an hour."),
        ("Queue", "Background jobs go through a small worker pool."),
    ]
    for title, body in notes:
        svc.record(MemoryDraft(type=MemoryType.FACT, title=title, body=body, scope_path=project))
    on = svc.recall("PostgreSQL dumps", scope=project, k=3, track=False)
    svc.recall_config = RecallConfig(stages=frozenset({"text"}))
    text_only = svc.recall("PostgreSQL dumps", scope=project, k=3, track=False)
    assert "entity" in on.stages  # the entity stage found the memory too
    assert on.hits[0].slug == text_only.hits[0].slug
    assert on.hits[0].score == pytest.approx(text_only.hits[0].score)


@pytest.mark.parametrize(
    ("query", "current"),
    [
        ("What ORM is currently used in the ecommerce-api?", True),
        ("Does the alembic/ directory still exist?", True),
        ("What is the current Docker image size?", True),
        ("我们现在用哪个数据库？", True),
        ("When was structlog added and what was the reason?", False),
        ("What was the original ORM before it was replaced?", False),
        ("Nowhere near the currency converter", False),
    ],
)
def test_asks_for_current(query: str, current: bool) -> None:
    assert asks_for_current(query) is current


def test_the_newer_memory_about_the_same_thing_answers_what_is_current(
    svc: MemoryService, project: Path
) -> None:
    """Before supersede judging links them, the newer of two memories about the same thing
    answers a question about what is current; a question about history keeps the ranking."""
    old = svc.record(
        MemoryDraft(
            type=MemoryType.SESSION,
            title="Session one",
            body="user: set up the ORM\nassistant: SQLAlchemy is the ORM; SQLAlchemy models "
            "live in models.py and the ORM session is async.",
            scope_path=project,
            created_at=START,
        )
    ).slug
    new = svc.record(
        MemoryDraft(
            type=MemoryType.SESSION,
            title="Session two",
            body="user: switch the ORM\nassistant: Tortoise is the ORM from today.",
            scope_path=project,
            created_at=START + timedelta(days=5),
        )
    ).slug
    for i in range(4):
        svc.record(
            MemoryDraft(
                type=MemoryType.SESSION,
                title=f"Session filler {i}",
                body=f"user: lint the code\nassistant: ruff passes on module {i}.",
                scope_path=project,
                created_at=START + timedelta(days=1 + i),
            )
        )
    asked = [h.slug for h in svc.recall("Which ORM do we use?", scope=project).hits]
    assert asked[:2] == [old, new]  # the fuller explanation first
    now = [h.slug for h in svc.recall("Which ORM do we currently use?", scope=project).hits]
    assert now[:2] == [new, old]
    moved = svc.recall("Which ORM do we currently use?", scope=project).hits[0]
    assert f"newer than {old}" in moved.paths


def test_the_score_explains_the_query_weight(svc: MemoryService, project: Path) -> None:
    for title, body in [
        ("Cache", "Redis holds the product catalogue cache for ten minutes."),
        ("Deploy", "The API deploys with docker compose behind nginx."),
        ("Tests", "pytest runs with coverage at eighty percent."),
    ]:
        svc.record(MemoryDraft(type=MemoryType.FACT, title=title, body=body, scope_path=project))
    short = svc.recall("cache", scope=project, track=False).hits[0]
    longer = svc.recall("redis catalogue cache minutes", scope=project, track=False).hits[0]
    assert 0.0 < short.factors["query weight"] < longer.factors["query weight"] < 1.0
    assert short.score < longer.score  # the same memory, named more fully


# --- the session where an entity of the asked kind entered the project ----------------------
SETUP = """user: Let's start the inventory-service. It tracks stock per warehouse behind a REST
API. Go with FastAPI and PostgreSQL, and run it all in Docker Compose.
assistant: Good stack for this. I'll lay out app/, models/ and routes/, with SQLAlchemy
models for Warehouse and StockItem and an Alembic migration for the first tables."""
POOL_TIMEOUTS = """user: Under load the service stalls and requests time out after 30 seconds,
mostly on the bulk stock import.
assistant: The connection pool is exhausted: it holds five connections and the import keeps
them. I raised the pool to twenty, gave the import its own session, and set a statement
timeout in PostgreSQL so one slow database query can no longer hold a connection."""
MIGRATIONS = """user: Which database migration tool should we standardise on? The schema
changes every week and the revisions keep conflicting.
assistant: Keep Alembic: autogenerate each revision, review it, and run alembic upgrade head
in CI before the tests. Rebase revisions when two branches both add one."""
OTHER_WORK = [
    """user: Add structured logging. I want a request ID on every log line and JSON output in
production, readable lines locally.
assistant: Done with structlog: a middleware binds the request ID from the X-Request-ID header
or makes one, and the renderer is JSON unless LOG_FORMAT=console is set for local work.""",
    """user: The stock endpoints need rate limiting, per client key, shared across all the
uvicorn workers.
assistant: I added slowapi with a shared token bucket: 100 requests a minute per key on reads, 20 on
writes, and a 429 with a Retry-After header when a client goes over.""",
    """user: Set up CI so every pull request runs the tests and the linters before anyone
reviews it.
assistant: A GitHub Actions workflow now runs ruff, mypy and pytest with coverage on each pull
request; the job fails under 85% coverage and caches the uv downloads between runs.""",
]


def session(svc: MemoryService, project: Path, day: int, body: str) -> str:
    """A whole recorded session (many lines), as `memoryd capture` stores one."""
    draft = MemoryDraft(
        type=MemoryType.SESSION,
        title="Session",
        body=body,
        scope_path=project,
        created_at=START + timedelta(days=day),
    )
    return svc.record(draft).slug


def test_which_kind_is_answered_where_an_entity_of_that_kind_entered_the_project(
    svc: MemoryService, project: Path
) -> None:
    """ "What database does it use?" is answered by the session that chose PostgreSQL, not by
    the later ones that say "database" while only using it; the evidence reorders and stays
    out of the calibrated score."""
    setup = session(svc, project, 0, SETUP)
    for day, body in enumerate(OTHER_WORK, start=1):
        session(svc, project, day, body)
    pool = session(svc, project, 5, POOL_TIMEOUTS)
    session(svc, project, 9, MIGRATIONS)
    question = "What database do we use?"
    hits = svc.recall(question, scope=project, k=3, track=False).hits
    assert hits[0].slug == setup
    assert hits[0].paths == ["database → PostgreSQL → memory"]
    # The later session naming PostgreSQL in passing gets no kind evidence.
    assert "kind" not in next(h for h in hits if h.slug == pool).factors
    # The setup says neither "database" nor "use": the evidence reorders, and the calibrated
    # score (what `inject` thresholds) stays what its text holds of the question.
    assert hits[0].score == 0.0
    svc.recall_config = RecallConfig(stages=frozenset({"text"}))
    text_only = [h.slug for h in svc.recall(question, scope=project, k=3, track=False).hits]
    assert setup not in text_only
    assert pool in text_only


def test_a_kind_word_qualifying_another_noun_leads_no_session(
    svc: MemoryService, project: Path
) -> None:
    """In "What database migration tool …" the question asks for a tool; "database" only
    qualifies it, so the session that chose PostgreSQL gains nothing."""
    setup = session(svc, project, 0, SETUP)
    migrations = session(svc, project, 9, MIGRATIONS)
    question = "What database migration tool do we use?"
    hits = svc.recall(question, scope=project, k=3, track=False).hits
    assert hits[0].slug == migrations
    assert all("kind" not in h.factors for h in hits if h.slug == setup)


@pytest.mark.parametrize(
    ("query", "headed"),
    [
        ("What database does the ecommerce-api use?", {"database"}),
        ("What web framework is the ecommerce-api built with?", {"framework"}),
        ("Which databases do we run in production?", {"databases"}),
        ("What kind of message broker do we use?", {"broker"}),
        ("What database migration tool does the ecommerce-api currently use?", set()),
        ("What charting library is used in the dashboard?", set()),  # no kind: any library
        ("How do we back up the database?", set()),
    ],
)
def test_headed_kinds(query: str, headed: set[str]) -> None:
    assert headed_kinds(query) == headed


CELERY = """user: Should the order confirmation emails go through Celery?
assistant: No: asyncio background tasks are enough for non-critical work like emails; Celery
would add a broker and a worker to run for little gain.
user: Agreed, keep Celery out until a task needs retries across restarts."""


def test_a_whole_session_is_not_favoured_for_being_newer(svc: MemoryService, project: Path) -> None:
    """Two sessions telling the same decision half a year apart: the one whose text matches
    better ranks first. A project's history is not stale for being older; for a question
    about what is current, current-first decides by what the sessions say."""
    older = session(svc, project, 0, CELERY)
    newer = session(svc, project, 180, CELERY + "\nassistant: Noted, as before.")
    question = "Does the developer prefer Celery or asyncio for background tasks?"
    hits = svc.recall(question, scope=project, k=2, track=False).hits
    assert [h.slug for h in hits] == [older, newer]
    assert all("recency" not in h.factors for h in hits)
    assert hits[0].factors["bm25"] > hits[1].factors["bm25"]


CART_DESIGN = """user: How should we store shopping cart data in Redis?
assistant: A hash per user, one field per product with its quantity, and a 7-day expiry that
each write renews. HINCRBY changes a quantity in one step.
user: Good, do that."""
CHECKOUT = """user: Build the checkout endpoint now.
assistant: Checkout reads the cart data from Redis, checks stock, creates the order and clears
the cart. The cart data stays stored in Redis until the order commits, so a failed order
leaves the cart data stored in Redis as it was.
user: And the order data?
assistant: Order data is stored in PostgreSQL, with the cart lines copied in."""


def test_a_recorded_session_is_about_its_opening_request(svc: MemoryService, project: Path) -> None:
    """A session recorded under a neutral title is about what its first request asked, as a
    captured one (titled by that request) is: the session that set out to store the cart
    in Redis answers how the cart is stored, before a later one saying "cart" more often."""
    design = session(svc, project, 0, CART_DESIGN)
    checkout = session(svc, project, 1, CHECKOUT)
    hits = svc.recall("How is cart data stored in Redis?", scope=project, k=2, track=False).hits
    assert [h.slug for h in hits] == [design, checkout]
    assert hits[0].factors["title"] > 1.0
    assert "title" not in hits[1].factors
    assert hits[0].factors["bm25"] < hits[1].factors["bm25"]


@pytest.mark.parametrize(
    ("body", "opening"),
    [
        ("user: Add rate limiting.\nassistant: Done.", "Add rate limiting."),
        ("Human: " + "word " * 40, ("word " * 40).strip()[:OPENING_CHARS]),
        ("assistant: Hello.\nuser: Hi.", ""),
        ("Caroline: I went to a support group.", ""),
    ],
)
def test_opening_request(body: str, opening: str) -> None:
    assert opening_request(body) == opening


def test_a_light_word_ranks_but_is_no_evidence_of_an_answer(
    svc: MemoryService, project: Path
) -> None:
    """ "What cache do we use?": the memory saying "use" ranks first, but holding "use" says
    nothing about whether it answers, so both memories score alike and the query weighs
    as much as "What cache do we have?"."""
    slugs = {}
    for verb in ("use", "picked"):
        draft = MemoryDraft(
            type=MemoryType.FACT,
            title="Cache",
            body=f"Redis is the cache we {verb}, with a ten minute expiry.",
            scope_path=project,
        )
        slugs[verb] = svc.record(draft).slug
    svc.record(
        MemoryDraft(
            type=MemoryType.FACT,
            title="Deploy",
            body="We use docker compose behind nginx.",
            scope_path=project,
        )
    )
    hits = svc.recall("What cache do we use?", scope=project, k=3, track=False).hits
    assert [h.slug for h in hits[:2]] == [slugs["use"], slugs["picked"]]
    assert hits[0].score == pytest.approx(hits[1].score, abs=1e-6)
    plain = svc.recall("What cache do we have?", scope=project, k=3, track=False).hits
    assert plain[0].factors["query weight"] == hits[0].factors["query weight"]
