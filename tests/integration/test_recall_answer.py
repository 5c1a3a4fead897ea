"""Answer-type checking in recall: a question asking for a typed value (a version, a port, an
address) is answered by a memory stating one, not by one that only talks about the thing; a
question asking for a "<modifier> <head>" is not answered by a session about another kind of
head."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memoryd.models import MemoryDraft, MemoryType
from memoryd.recall import RecallConfig
from memoryd.recall.answer import MISSING_VALUE, asked_value, modified_otherwise
from memoryd.recall.config import DEFAULT_STAGES
from memoryd.recall.kinds import headed_frames
from memoryd.service import MemoryService
from tests.integration.test_recall_ranking import START, session

TUNING = """user: PostgreSQL is slow on the order history page, the queries take seconds.
assistant: PostgreSQL was scanning the whole orders table. I added a PostgreSQL index on
(user_id, created_at) and the PostgreSQL planner now uses it: the page loads in 40 ms. I also
raised work_mem for PostgreSQL so the sort stays in memory. We should move PostgreSQL to a
newer version one day; the planner improved."""
SETUP = """user: Start the billing service: FastAPI on Python 3.12, PostgreSQL 16 for the data,
all in Docker Compose.
assistant: The compose file runs the app and postgres:16-alpine; the app waits for the
database's health check before it starts."""
LOGGING = """user: Add structured logging with a request ID on every line.
assistant: structlog now binds the request ID in a middleware and renders JSON in production."""


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def test_a_version_question_is_answered_where_a_version_is_stated(
    svc: MemoryService, project: Path
) -> None:
    """The session saying "PostgreSQL" and "version" states no version; the one saying
    "PostgreSQL 16" does, and ranks first; the other keeps `MISSING_VALUE` of its
    score, and the factor shows why."""
    tuning = session(svc, project, 0, TUNING)
    setup = session(svc, project, 1, SETUP)
    session(svc, project, 2, LOGGING)
    question = "What PostgreSQL version do we run?"
    hits = {h.slug: h for h in svc.recall(question, scope=project, k=5, track=False).hits}
    assert next(iter(hits)) == setup
    assert hits[tuning].factors["no version"] == MISSING_VALUE
    assert "no version" not in hits[setup].factors
    svc.recall_config = RecallConfig(stages=DEFAULT_STAGES - {"answer"})
    unchecked = {h.slug: h for h in svc.recall(question, scope=project, k=5, track=False).hits}
    assert next(iter(unchecked)) == tuning
    assert hits[tuning].score == pytest.approx(unchecked[tuning].score * MISSING_VALUE, abs=1e-6)
    assert hits[setup].score == pytest.approx(unchecked[setup].score, abs=1e-6)


def test_a_question_asking_for_no_typed_value_is_not_checked(
    svc: MemoryService, project: Path
) -> None:
    session(svc, project, 0, TUNING)
    session(svc, project, 1, SETUP)
    hits = svc.recall("Why was PostgreSQL slow?", scope=project, k=5, track=False).hits
    assert all(not any(f.startswith("no ") for f in h.factors) for h in hits)


@pytest.mark.parametrize(
    ("query", "kind", "names"),
    [
        ("What PostgreSQL version is being used?", "version", ("postgresql",)),
        ("Which version of Node does the build use?", "version", ("node",)),
        ("What version are we on?", "version", ()),
        ("Which port does the API listen on?", "port", ()),
        ("What is the production domain name or URL?", "address", ("production",)),
        ("What did Evan suggest Sam should keep doing to find his own version of love?", None, ()),
        ("When was structlog added?", None, ()),
        ("How many workers does uvicorn run?", None, ()),
    ],
)
def test_asked_value(query: str, kind: str | None, names: tuple[str, ...]) -> None:
    asked = asked_value(query, words)
    assert (asked.kind.name if asked else None) == kind
    if asked:
        assert asked.names == names


@pytest.mark.parametrize(
    ("question", "text", "held"),
    [
        ("What Python version is used?", "We pinned Python 3.12 in the Dockerfile.", True),
        ("What Postgres version is used?", "image: postgres:16-alpine", True),
        ("What Python version is used?", "python 3 is what we run", True),
        (
            "What Python version is used?",
            "Python runs the workers; the health check returns version 1.0.0 of the API.",
            False,
        ),
        ("What Python version is used?", "Python everywhere, no numbers here.", False),
        ("What version are we on?", "The health check returns 1.0.0.", True),
    ],
)
def test_a_value_counts_only_near_what_the_question_names(
    question: str, text: str, held: bool
) -> None:
    asked = asked_value(question, words)
    assert asked is not None
    assert asked.held_in(text, words) is held


PAYMENTS = """user: Wire up checkout payments with Stripe for card payments.
assistant: Stripe is the payment provider: the API creates a PaymentIntent per order, and the
webhook marks the order paid when the payment provider confirms the charge. Keys live in env.
user: And refunds?
assistant: A refund endpoint calls the payment provider's refund API and records the row."""
DEPLOY = """user: Deploy the service so the staging team can try it.
assistant: It now runs on Hetzner: one cloud VM with Docker Compose behind nginx, deployed by
a GitHub Actions job on each merge to main.
user: Can we roll back?
assistant: Yes: the job tags each image, and the rollback script starts the previous tag."""


def test_a_session_holding_the_head_without_its_modifier_is_about_another_kind(
    svc: MemoryService, project: Path
) -> None:
    """ "What cloud provider …": the session about the payment provider holds "provider"
    only as another compound and never "cloud", so that word's share of the question does
    not count for it; the session saying "cloud" keeps its score."""
    payments = session(svc, project, 0, PAYMENTS)
    deploy = session(svc, project, 1, DEPLOY)
    session(svc, project, 2, LOGGING)
    question = "What cloud provider is the service deployed on?"
    hits = {h.slug: h for h in svc.recall(question, scope=project, k=5, track=False).hits}
    svc.recall_config = RecallConfig(stages=DEFAULT_STAGES - {"answer"})
    unchecked = {h.slug: h for h in svc.recall(question, scope=project, k=5, track=False).hits}
    assert 0.0 < hits[payments].factors["another kind"] < 1.0
    assert hits[payments].score == pytest.approx(
        unchecked[payments].score * hits[payments].factors["another kind"], abs=1e-4
    )
    assert "another kind" not in hits[deploy].factors
    assert hits[deploy].score == pytest.approx(unchecked[deploy].score, abs=1e-6)
    assert hits[payments].score < unchecked[payments].score


def test_a_turn_holding_the_head_without_its_modifier_keeps_its_score(
    svc: MemoryService, project: Path
) -> None:
    """A one-line turn names the instance, not the kind: "the jazz night was a great event"
    answers "What music events …" without saying "music"."""
    draft = MemoryDraft(
        type=MemoryType.SESSION,
        title="John",
        body="John: The jazz night downtown was a great event, I loved it.",
        scope_path=project,
        created_at=START,
        allow_duplicate=True,
    )
    turn = svc.record(draft).slug
    hits = svc.recall("What music events has John attended?", scope=project, track=False).hits
    hit = next(h for h in hits if h.slug == turn)
    assert "another kind" not in hit.factors


@pytest.mark.parametrize(
    ("query", "frames"),
    [
        ("What cloud provider is it deployed on?", [(["cloud"], "provider")]),
        ("What database migration tool do we use?", [(["database", "migration"], "tool")]),
        ("What database does the API use?", [([], "database")]),
        ("How do we deploy?", []),
    ],
)
def test_headed_frames(query: str, frames: list[tuple[list[str], str]]) -> None:
    assert headed_frames(query) == frames


@pytest.mark.parametrize(
    ("text", "otherwise"),
    [
        ("Stripe is the payment provider; the payment provider confirms.", True),
        ("NextAuth.js with the Credentials provider.", True),
        ("Docker Compose will orchestrate the services: app and Redis.", False),
        ("Providers: none yet. The payment provider is Stripe.", False),
        ("Nothing about it here.", False),
    ],
)
def test_a_head_counts_as_another_kind_only_where_another_word_modifies_it(
    text: str, otherwise: bool
) -> None:
    """ "What external services …" is answered by a session listing "the services" it runs:
    the head said alone may be the thing asked about; said only as another compound ("the
    Credentials provider") it is not."""
    heads = frozenset(words("provider services"))
    stems = frozenset(w.rstrip("s") for w in heads)

    def analyse(text: str) -> list[str]:
        return [w.rstrip("s") for w in words(text)]

    assert modified_otherwise(text, stems, analyse) is otherwise
