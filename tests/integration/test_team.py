"""The team server end to end on one machine: a FalkorDB server (the `falkordb_url`
fixture), `memoryd team init`, three users by the CLI, and `memoryd team serve` over TLS on
127.0.0.1. Alice (write on the shop project) records a decision; Bob (read) recalls it,
naming Alice; Carol (a grant on another project only) gets a 403 from recall, search, list
and get; a revoked token and a missing one get a 401; the audit names the user."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import isolate_environment
from tests.daemon_harness import uds_client
from tests.pins import PINNED_ENV

SHOP_SSH = "git@github.com:acme/shop.git"
SHOP_HTTPS = "https://github.com/acme/shop"
OTHER = "git@github.com:acme/other.git"
START_S = 90.0


@dataclass
class Team:
    home: Path
    url: str
    cert: Path
    tokens: dict[str, str]

    def client(self, user: str | None) -> httpx.Client:
        headers = {} if user is None else {"Authorization": f"Bearer {self.tokens[user]}"}
        context = ssl.create_default_context(cafile=str(self.cert))
        return httpx.Client(base_url=self.url, headers=headers, verify=context, timeout=60)

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "memoryd", "team", *args, "--home", str(self.home)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**PINNED_ENV, **os.environ},
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, falkordb_url: str) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("team")
    with pytest.MonkeyPatch.context() as patch:
        isolate_environment(patch, root)
        patch.setenv("MEMORYD_DAEMON__AUTOSTART", "0")
        home = root / "server"
        team = Team(home, "", home / "tls" / "cert.pem", {})
        team.cli("init", "--port", "0", "--falkordb-url", falkordb_url,
                 "--graph-name", f"team-{uuid.uuid4().hex}")  # fmt: skip
        for user in ("alice", "bob", "carol"):
            team.tokens[user] = team.cli("user", "add", user).strip()
        team.cli("grant", "alice", SHOP_SSH, "--role", "write")
        team.cli("grant", "bob", SHOP_HTTPS, "--role", "read")
        team.cli("grant", "carol", OTHER, "--role", "admin")
        log = (root / "server.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "team", "serve", "--home", str(home)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**PINNED_ENV, **os.environ},
        )
        try:
            listen = home / "team-listen.json"
            deadline = time.monotonic() + START_S
            while not listen.exists():
                assert process.poll() is None, (root / "server.log").read_text()
                assert time.monotonic() < deadline, "the team server did not start"
                time.sleep(0.1)
            address = json.loads(listen.read_text())
            team.url = f"https://127.0.0.1:{address['port']}"
            yield team
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def record(team: Team, user: str, title: str, scope: str = SHOP_SSH) -> httpx.Response:
    body = {"type": "decision", "title": title, "body": f"{title}. Decided in review.",
            "scope": scope}  # fmt: skip
    with team.client(user) as client:
        return client.post("/v1/memories", json=body)


def test_a_decision_alice_records_reaches_bob_and_not_carol(team: Team) -> None:
    made = record(team, "alice", "Payments moved from Stripe Checkout to Stripe Elements")
    assert made.status_code == 201, made.text
    slug = made.json()["meta"]["slug"]

    with team.client("bob") as bob:
        recalled = bob.get("/v1/recall", params={"q": "stripe payments", "scope": SHOP_HTTPS})
        assert recalled.status_code == 200, recalled.text
        hits = recalled.json()["hits"]
        assert [h["slug"] for h in hits] == [slug]
        assert hits[0]["recorded_by"] == "alice"
        posted = bob.post("/v1/recall", json={"q": "stripe elements", "scope": SHOP_SSH})
        assert [h["recorded_by"] for h in posted.json()["hits"]] == ["alice"]
        found = bob.get("/v1/search", params={"q": "stripe", "scope": SHOP_SSH})
        assert [h["slug"] for h in found.json()["items"]] == [slug]
        listed = bob.get("/v1/memories", params={"scope": "github.com/acme/shop"})
        assert [m["slug"] for m in listed.json()["items"]] == [slug]
        got = bob.get(f"/v1/memories/{slug}")
        assert got.status_code == 200
        assert got.json()["recorded_by"] == "alice"
        refused = bob.post(
            "/v1/memories", json={"type": "fact", "title": "x", "body": "y", "scope": SHOP_SSH}
        )
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "scope_not_granted"
        assert "needs write" in refused.json()["error"]["message"]

    with team.client("carol") as carol:
        answers = [
            carol.get("/v1/recall", params={"q": "stripe payments", "scope": SHOP_SSH}),
            carol.post("/v1/recall", json={"q": "stripe", "scope": SHOP_SSH}),
            carol.get("/v1/search", params={"q": "stripe", "scope": SHOP_SSH}),
            carol.get("/v1/memories", params={"scope": SHOP_SSH}),
            carol.get(f"/v1/memories/{slug}"),
        ]
        for answer in answers:
            assert answer.status_code == 403, answer.text
            assert answer.json()["error"]["code"] == "scope_not_granted"
            assert "Stripe" not in answer.text
        # her own project is empty: nothing of the shop's leaks into it
        own = carol.get("/v1/recall", params={"q": "stripe payments", "scope": OTHER})
        assert own.status_code == 200
        assert own.json()["hits"] == []

    with uds_client(team.home) as admin:  # the admin socket: local rules, no token
        actors = {r["actor"] for r in admin.get("/v1/audit", params={"limit": 500}).json()["items"]}
    assert "team:alice" in actors


def test_routes_not_gated_per_project_are_refused_to_team_users(team: Team) -> None:
    with team.client("alice") as alice:
        for answer in (
            alice.post("/v1/graph/cypher", json={"query": "MATCH (m) RETURN m LIMIT 1"}),
            alice.get("/v1/entities"),
            alice.get("/v1/audit"),
            alice.post("/v1/reindex"),
            alice.get("/v1/memories", params={}),
        ):
            assert answer.status_code in (403, 422), answer.text
        assert alice.get("/v1/entities").json()["error"]["code"] == "not_for_team"
        assert alice.get("/v1/memories").json()["error"]["code"] == "invalid_input"


def test_a_token_is_needed_and_a_revoked_one_is_refused_at_once(team: Team) -> None:
    with team.client(None) as anonymous:
        answer = anonymous.get("/v1/recall", params={"q": "x", "scope": SHOP_SSH})
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "token_refused"
    with pytest.raises(httpx.TransportError):  # TLS only: plain HTTP gets no answer
        httpx.get(team.url.replace("https", "http") + "/v1/health", timeout=10)
    token = team.cli("token", "add", "bob").strip()
    team.tokens["bob2"] = token
    with team.client("bob2") as bob:
        assert bob.get("/v1/recall", params={"q": "stripe", "scope": SHOP_SSH}).status_code == 200
        team.cli("token", "revoke", token)
        answer = bob.get("/v1/recall", params={"q": "stripe", "scope": SHOP_SSH})
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "token_refused"
        assert "revoked" in answer.json()["error"]["message"]
    listed = team.cli("user", "list", "--json")
    assert "mdt_" not in listed  # ids and states only, never a token
    bob = next(u for u in json.loads(listed) if u["user"] == "bob")
    assert [t["state"].split()[0] for t in bob["tokens"]] == ["active", "revoked"]
    assert bob["roles"] == {"github.com/acme/shop": "read"}
    with team.client("bob") as first:  # bob's other token still works
        assert first.get("/v1/recall", params={"q": "stripe", "scope": SHOP_SSH}).status_code == 200


def test_a_memory_written_on_the_admin_socket_is_gated_by_its_project(team: Team) -> None:
    """No author row (not recorded through the team listener): the get is decided by the
    memory's own scope, read before the app's get counts it as a read."""
    shop = team.home / "team-projects" / "github.com" / "acme" / "shop"
    (shop / ".git").mkdir(parents=True, exist_ok=True)  # as the server makes it on first use
    body = {"type": "fact", "title": "The shop's ledger runs on Postgres 16",
            "body": "Upgraded in March.", "scope": str(shop)}  # fmt: skip
    with uds_client(team.home, actor="admin") as admin:
        made = admin.post("/v1/memories", json=body)
    assert made.status_code == 201, made.text
    slug = made.json()["meta"]["slug"]
    with team.client("carol") as carol:
        for _ in range(2):
            answer = carol.get(f"/v1/memories/{slug}")
            assert answer.status_code == 403
            assert answer.json()["error"]["code"] == "scope_not_granted"
    with team.client("bob") as bob:
        got = bob.get(f"/v1/memories/{slug}")
        assert got.status_code == 200
        assert got.json()["recorded_by"] is None
        assert got.json()["meta"]["recall_count"] == 0  # carol's refused gets counted nothing
        assert bob.get("/v1/memories/no-such-memory").status_code == 404
