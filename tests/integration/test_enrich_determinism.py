"""Issue 13, item 5: the same data must always rank the same, so the same captures must
always give the same graph.

Each captured session is extracted against the entities the sessions enriched before it
added, so the graph depends on the order they are enriched in. That order was the queue's,
stamped to the second at drain: a drain that crossed a second boundary elsewhere enriched
them in another order (DevMemBench's capture path gave `PaymentIntent` at 1.0 or at 0.4, and
recall flipped). The sessions here are captured by the real hook from Claude Code transcripts,
drained and enriched in fresh homes, with the captures reaching the inbox in other orders and
other batches; the graphs must be equal.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memoryd.capture import hook
from memoryd.config import Settings, load_settings
from memoryd.wiring import open_service
from tests.conftest import ENGINE
from tests.integration.test_capture import ClaudeTranscript

# (session id, day, turns): a small project's sessions, written like real ones. Later ones
# name, bare, what earlier ones introduced ("the PaymentIntent", JWT_SECRET, Aerich); their
# ids do not sort in the order the sessions happened.
SESSIONS: list[tuple[str, int, list[tuple[str, str]]]] = [
    (
        "9b6f1c52-3a47-4d0e-9c1e-7a2d5e8f9a01",
        3,
        [
            ("user", "Set up the FastAPI project with Tortoise ORM and PostgreSQL."),
            (
                "assistant",
                "Created `app/main.py` with FastAPI and registered Tortoise ORM. Migrations use"
                " Aerich: run `aerich init -t app.db.TORTOISE_ORM` then `aerich upgrade`.",
            ),
        ],
    ),
    (
        "1c7a2d63-4b58-4e1f-8d2f-8b3e6f9a0b12",
        4,
        [
            ("user", "Add login with JWT. Where should the signing key live?"),
            (
                "assistant",
                "Tokens are signed with `JWT_SECRET` read from the environment in"
                " `app/auth/tokens.py` (python-jose, HS256, 15 minute expiry).",
            ),
        ],
    ),
    (
        "7d8b3e74-5c69-4f20-9e30-9c4f7a0b1c23",
        5,
        [
            ("user", "Wire Stripe checkout for orders."),
            (
                "assistant",
                "`stripe.PaymentIntent.create(amount=total, currency='eur')` runs in"
                " `app/payments/checkout.py`; the client confirms it with Stripe Elements.",
            ),
        ],
    ),
    (
        "3e9c4f85-6d7a-4031-8f41-0d5a8b1c2d34",
        6,
        [
            ("user", "The webhook fires twice for one payment. Why?"),
            (
                "assistant",
                "Stripe retries until it gets a 2xx. The handler now stores the PaymentIntent"
                " id and ignores one it has seen, so a retried event does nothing.",
            ),
        ],
    ),
    (
        "4f0d5a96-7e8b-4142-9052-1e6b9c2d3e45",
        7,
        [
            ("user", "Rotate the signing key without logging everyone out."),
            (
                "assistant",
                "JWT_SECRET becomes a list: new tokens use the first key, verification tries"
                " each. Remove the old key after the 15 minute expiry has passed.",
            ),
        ],
    ),
    (
        "0a1e6ba7-8f9c-4253-8163-2f7c0d3e4f56",
        8,
        [
            ("user", "Add a refunds table."),
            (
                "assistant",
                "Added the Refund model. Aerich generated the migration; it references the"
                " PaymentIntent id so a refund can be traced to its charge.",
            ),
        ],
    ),
]


def _capture(home: Path, projects: Path, transcripts: Path, indices: Sequence[int]) -> None:
    """Run the Claude Code SessionEnd hook (in this process, as the bench does) per session."""
    project = projects / "shop-api"
    project.mkdir(parents=True, exist_ok=True)
    transcripts.mkdir(parents=True, exist_ok=True)
    for i in indices:
        session_id, day, turns = SESSIONS[i]
        transcript = ClaudeTranscript(transcripts / f"{session_id}.jsonl", session_id, str(project))
        transcript.when = datetime(2026, 3, day, 9, 0, tzinfo=UTC)
        for role, text in turns:
            if role == "user":
                transcript.prompt(text)
            else:
                transcript.say(text)
        payload = json.dumps(transcript.payload("SessionEnd", reason="exit"))
        code = hook.main(
            ["--source=claude-code", f"--home={home}"],
            stdin=io.StringIO(payload),
            stdout=io.StringIO(),
        )
        assert code == 0


def _next_second() -> None:
    """Sleep into the next wall-clock second: the queue stamps its rows to the second."""
    time.sleep(1.02 - time.time() % 1.0)


def _graph(settings: Settings) -> dict[str, Any]:
    """What enrichment put in the graph, without the wall-clock stamps of this run."""
    svc = open_service(settings)
    try:
        snap = svc.graph.snapshot()
    finally:
        svc.close()
    return {
        "mentions": [tuple(row) for row in snap["mentions"]],
        "entities": [
            (row[0], row[1], row[2], sorted(row[3] or []), row[7]) for row in snap["entities"]
        ],
        "relates": sorted((row[1], row[2], row[4], row[5], row[6]) for row in snap["relates"]),
    }


def _captured_and_enriched(root: Path, batches: Sequence[Sequence[int]]) -> dict[str, Any]:
    """A fresh home; each batch captured and drained in its own second; then enriched."""
    home = root / "home"
    settings = load_settings(home, graph={"engine": ENGINE, "buffer_pool_mb": 128})
    for batch in batches:
        _capture(home, root / "projects", root / "transcripts", batch)
        svc = open_service(settings)
        try:
            _next_second()
            assert svc.drain_inbox() == len(batch)
        finally:
            svc.close()
    svc = open_service(settings)
    try:
        assert svc.enrich_pending(use_llm=False) == len(SESSIONS)
    finally:
        svc.close()
    return _graph(settings)


def test_the_same_captures_give_the_same_graph_whatever_order_they_were_drained_in(
    tmp_path: Path,
) -> None:
    first = _captured_and_enriched(tmp_path / "a", [[0, 1, 2], [3, 4, 5]])
    again = _captured_and_enriched(tmp_path / "b", [[3, 4, 5], [0, 1, 2]])
    one_by_one = _captured_and_enriched(tmp_path / "c", [[5], [2], [4], [0], [3], [1]])

    names = {row[1] for row in first["mentions"]}
    assert {"entity:tool:Aerich", "entity:concept:PaymentIntent"} <= names, names
    assert again == first
    assert one_by_one == first
