"""kill -9 (or `stop`) of a daemon whose search index cannot commit: the records it
acknowledged wait for the index (its health says so), their journal intents stay open, and the
next start indexes them again once the index can be written, each once, with the four stores
agreeing."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.audit import AuditLog
from memoryd.journal import Journal
from tests.daemon_harness import four_way, running, uds_client
from tests.faults import unwritable
from tests.integration.test_commit_retry import failing
from tests.integration.test_group_commit import body, record
from tests.waiting import wait_until


@pytest.mark.parametrize("end", ["kill -9", "stop"])
def test_a_kill_while_the_index_cannot_commit_loses_no_acknowledged_record(
    home: Path, project: Path, end: str
) -> None:
    """`stop` too: the daemon's close tries the commit once more, fails, and exits cleanly,
    leaving the intents for the next start."""
    env = {"MEMORYD_SEARCH__COMMIT_DELAY_MS": "100", "MEMORYD_DAEMON__RECALL_READERS": "0"}
    with running(home, env=env) as daemon, uds_client(daemon.home) as client:
        first = record(client, body(0, project))
        wait_until(lambda: not Journal(home).slugs_in_flight(), what="the first commit")
        with unwritable(home / "search"):
            slugs = [record(client, body(i, project)) for i in range(1, 5)]
            health = failing(client, 2)
            assert health["index_waiting"] == 4
            assert Journal(home).slugs_in_flight() == set(slugs)
            if end == "kill -9":
                daemon.kill()
            else:
                assert daemon.stop(timeout_s=120) == 0, daemon.log_text()
    # The fault cleared; the next daemon settles the open intents before it serves.
    with running(home, env=env) as daemon, uds_client(daemon.home) as client:
        assert client.get("/v1/health").json()["index_waiting"] == 0
        for i, slug in enumerate([first, *slugs]):
            found = client.get("/v1/search", params={"q": f"rottnest{i}", "scope": str(project)})
            assert [h["slug"] for h in found.json()["items"]] == [slug]
        agreement = four_way(home, client)
        assert agreement["agree"], agreement
        assert agreement["index"] == 5
        # Their audit lines had landed: recovery indexed them again and wrote no line more.
        records = [str(r.target_id) for r in AuditLog(home / "audit").read(event_type="record")]
        assert sorted(records) == sorted([first, *slugs])
        assert not Journal(home).slugs_in_flight()
        doctor = client.get("/v1/doctor").json()
        assert [c for c in doctor if not c["ok"]] == []
