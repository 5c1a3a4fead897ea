"""The team server end to end on one machine: a FalkorDB server (the `falkordb_url`
fixture), `memoryd team init`, three users by the CLI, and `memoryd team serve` over TLS on
127.0.0.1. Alice (write on the shop project) records a decision; Bob (read) recalls it,
naming Alice; Carol (a grant on another project only) gets a 403 from recall, search, list
and get; a revoked token and a missing one get a 401; the audit names the user."""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest

from tests.conftest import isolate_environment
from tests.daemon_harness import free_port, uds_client
from tests.team_harness import Team

SHOP_SSH = "git@github.com:acme/shop.git"
SHOP_HTTPS = "https://github.com/acme/shop"
OTHER = "git@github.com:acme/other.git"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, falkordb_url: str) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("team")
    with pytest.MonkeyPatch.context() as patch:
        isolate_environment(patch, root)
        patch.setenv("MEMORYD_DAEMON__AUTOSTART", "0")
        team = Team.init(root / "server", falkordb_url, f"team-{uuid.uuid4().hex}")
        for user in ("alice", "bob", "carol"):
            team.add_user(user)
        team.cli("grant", "alice", SHOP_SSH, "--role", "write")
        team.cli("grant", "bob", SHOP_HTTPS, "--role", "read")
        team.cli("grant", "carol", OTHER, "--role", "admin")
        try:
            yield team.start()
        finally:
            team.stop()


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
            alice.get("/v1/audit"),
            alice.post("/v1/reindex", json={}),
            alice.post("/v1/sync/export", json={"out": "/tmp/x.json"}),
            alice.get("/v1/entities/Stripe/context"),
            alice.get("/v1/digest"),
        ):
            assert answer.status_code == 403, answer.text
            assert answer.json()["error"]["code"] == "not_for_team"
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


def test_cypher_entities_page_and_events_see_only_the_projects_granted(team: Team) -> None:
    """User Cypher, the entity routes, the graph page and its event stream all answer from
    what the caller may read: Carol (a grant on another project) sees none of the shop's
    memories or of what they say, Bob (read on the shop) sees them."""
    title = "Checkout calls the Adyen gateway for card payments"
    made = record(team, "alice", title)
    assert made.status_code == 201, made.text
    record(team, "carol", "The other project's ledger lives in Cassandra", scope=OTHER)
    projects = team.home / "team-projects" / "github.com" / "acme"
    with uds_client(team.home, actor="admin") as admin:  # entities, as the MCP graph tools do
        for project, entity in (("shop", "entity:company:Adyen"), ("other", "entity:db:Cassandra")):
            memory = {"type": "fact", "title": f"{entity} in {project}",
                      "scope": str(projects / project)}  # fmt: skip
            made = admin.post("/v1/graph/facts", json={"memory": memory, "entity_ids": [entity]})
            assert made.status_code == 201, made.text
    count = {"query": "MATCH (m:Memory) RETURN m.title, m.scope_hash", "limit": 500}
    with team.client("bob") as bob:
        answer = bob.post("/v1/graph/cypher", json=count)
        assert answer.status_code == 200, answer.text
        rows = answer.json()["rows"]
        assert title in [r[0] for r in rows]
        assert "Cassandra" not in json.dumps(rows)
        projects = bob.get("/v1/projects").json()
        assert [p["path"] for p in projects] == ["github.com/acme/shop"]
        shop_hash = projects[0]["scope_hash"]
        browsed = bob.get("/v1/page/memories", params={"scope": shop_hash}).json()["items"]
        assert title in [m["title"] for m in browsed]
    with team.client("carol") as carol:
        answer = carol.post("/v1/graph/cypher", json=count)
        assert answer.status_code == 200, answer.text
        assert "Adyen" not in answer.text
        assert "Stripe" not in answer.text
        titles = sorted(r[0] for r in answer.json()["rows"])
        assert titles == [
            "The other project's ledger lives in Cassandra",
            "entity:db:Cassandra in other",
        ]
        every = carol.post("/v1/graph/cypher", json={"query": "MATCH (n) RETURN n", "limit": 5000})
        assert every.status_code == 200
        assert "Adyen" not in every.text
        edges = carol.post("/v1/graph/cypher", json={"query": "MATCH ()-[r]->() RETURN r"})
        assert "Adyen" not in edges.text
        entities = carol.get("/v1/entities", params={"limit": 1000})
        assert entities.status_code == 200, entities.text
        assert "adyen" not in entities.text.lower()
        assert "Cassandra" in [e["name"] for e in entities.json()["items"]]
        assert carol.get("/v1/entities/Adyen").status_code == 404
        assert carol.get("/v1/page/graph", params={"entity": "Adyen"}).status_code == 404
        assert all(p["path"] != "github.com/acme/shop" for p in carol.get("/v1/projects").json())
        page = carol.get("/v1/page/memories", params={"scope": shop_hash})
        assert page.status_code == 403, page.text
        events = read_events(team, carol)
        assert "Adyen" not in events
        assert "Stripe" not in events
        assert "Cassandra" in events  # her own project's events do come through
    with team.client("bob") as bob:
        assert "Adyen" in read_events(team, bob)
        stripe = bob.get("/v1/entities", params={"q": "Adyen"})
        assert stripe.status_code == 200, stripe.text
        names = [e["name"] for e in stripe.json()["items"]]
        assert names, stripe.text
        graph = bob.get("/v1/page/graph", params={"entity": names[0]})
        assert graph.status_code == 200, graph.text


def read_events(team: Team, client: httpx.Client) -> str:
    """The page's event stream from the start of the audit log, read until it has sent the
    newest event the audit log holds (the server sends them all in its first poll)."""
    with uds_client(team.home) as admin:
        newest = admin.get("/v1/audit", params={"limit": 1}).json()["items"][-1]["seq"]
    text = ""
    with client.stream("GET", "/v1/events", params={"after": 0}) as stream:
        for chunk in stream.iter_text():
            text += chunk
            seqs = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
            if seqs and max(seqs) >= newest:
                break
    return text


async def _mcp_answers(
    team: Team, user: str, calls: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Each team MCP tool's answer (or its error text) for `user`, through the SDK's client."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    context = ssl.create_default_context(cafile=str(team.cert))
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {team.tokens[user]}"},
        verify=context,
        timeout=httpx2.Timeout(60.0),
    )
    out: dict[str, Any] = {}
    async with http, Client(streamable_http_client(f"{team.url}/mcp", http_client=http)) as mcp:
        out["tools"] = sorted(t.name for t in (await mcp.list_tools()).tools)
        calls = calls or {
            "recall": {"query": "stripe payments", "project": SHOP_SSH},
            "search": {"query": "stripe", "project": SHOP_HTTPS},
            "graph_query": {"query": "MATCH (m:Memory) RETURN m.title"},
            "remember": {
                "project": SHOP_SSH,
                "type": "fact",
                "title": "MCP write",
                "body": "Written through MCP.",
            },
        }
        for tool, args in calls.items():
            result = await mcp.call_tool(tool, args)
            text = "".join(getattr(c, "text", "") for c in result.content)
            out[tool] = ("error: " if result.is_error else "") + text
    return out


def test_mcp_tools_are_gated_per_project(team: Team) -> None:
    made = record(team, "alice", "Payments settle through Stripe Connect payouts")
    assert made.status_code == 201, made.text
    bob = anyio.run(_mcp_answers, team, "bob")
    assert bob["tools"] == ["get_memory", "graph_query", "recall", "remember", "search"]
    assert "Stripe Connect" in bob["recall"]
    assert '"recorded_by": "alice"' in bob["recall"]
    assert "Stripe" in bob["search"]
    assert "Stripe" in bob["graph_query"]
    assert bob["remember"].startswith("error:")
    assert "needs write" in bob["remember"]
    carol = anyio.run(_mcp_answers, team, "carol")
    for tool in ("recall", "search", "remember"):
        assert carol[tool].startswith("error:"), carol[tool]
        assert "no access" in carol[tool], carol[tool]
    assert not carol["graph_query"].startswith("error:")
    assert "Stripe" not in json.dumps(carol)
    alice = anyio.run(_mcp_answers, team, "alice")
    assert not alice["remember"].startswith("error:"), alice["remember"]


def test_no_answer_names_a_path_of_the_server(team: Team) -> None:
    """The server's data dir (its vault files, its project directories) appears in no answer
    a team user gets, over HTTP, MCP or the event stream; a project reads as its key."""
    homes = {str(team.home), str(team.home.resolve())}
    made = record(team, "alice", "Refunds go through the Stripe refunds API")
    assert made.status_code == 201, made.text
    slug = made.json()["meta"]["slug"]
    texts = [made.text]
    with team.client("alice") as alice:
        node = {"query": "MATCH (m:Memory) RETURN m, m.path", "limit": 50}
        scopes = {"query": "MATCH (s:Scope) RETURN s.path, s", "limit": 50}
        cypher = [alice.post("/v1/graph/cypher", json=q) for q in (node, scopes)]
        assert all(answer.status_code == 200 for answer in cypher), cypher[0].text
        assert ["github.com/acme/shop"] in [r[:1] for r in cypher[1].json()["rows"]]
        shop = alice.get("/v1/projects").json()[0]["scope_hash"]
        answers = [
            *cypher,
            alice.get(f"/v1/memories/{slug}"),
            alice.get("/v1/recall", params={"q": "stripe refunds", "scope": SHOP_SSH}),
            alice.post("/v1/recall", json={"q": "stripe refunds", "scope": SHOP_SSH}),
            alice.get("/v1/search", params={"q": "refunds", "scope": SHOP_SSH}),
            alice.get("/v1/memories", params={"scope": SHOP_SSH}),
            alice.get("/v1/page/memories", params={"scope": shop}),
            alice.get("/v1/projects"),
            alice.get("/v1/entities", params={"limit": 1000}),
            alice.get("/v1/memories/no-such-memory"),
        ]
        assert all(answer.status_code in (200, 404) for answer in answers), answers
        texts += [answer.text for answer in answers]
        texts.append(read_events(team, alice))
    calls = {
        "get_memory": {"slug": slug},
        "graph_query": {"query": "MATCH (m:Memory) RETURN m.path, m"},
        "recall": {"query": "stripe refunds", "project": SHOP_SSH},
        "remember": {"project": SHOP_SSH, "type": "fact", "title": "Refund window",
                     "body": "Refunds are allowed for 30 days."},
    }  # fmt: skip
    mcp = anyio.run(_mcp_answers, team, "alice", calls)
    assert not any(str(v).startswith("error:") for v in mcp.values()), mcp
    texts += [str(v) for v in mcp.values()]
    for text in texts:
        assert not any(home in text for home in homes), text[:2000]
    assert f"{slug}.md" in cypher[0].text  # the vault file, by its path inside the data dir


def test_team_admins_manage_users_tokens_and_grants_over_http(team: Team) -> None:
    team.cli("user", "add", "erin", "--admin")
    team.tokens["erin"] = team.cli("token", "add", "erin").strip()
    with team.client("bob") as bob:  # not an admin: no user list, no user added
        refused = bob.get("/v1/team/users")
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "team_denied"
        assert bob.post("/v1/team/users", json={"name": "mallory"}).status_code == 403
        grant = {"user": "bob", "project": SHOP_SSH, "role": "admin"}
        assert bob.put("/v1/team/grants", json=grant).status_code == 403  # read only there
    with team.client("erin") as erin:
        added = erin.post("/v1/team/users", json={"name": "dave"})
        assert added.status_code == 200, added.text
        team.tokens["dave"] = added.json()["token"]
        grant = {"user": "dave", "project": SHOP_HTTPS, "role": "read"}
        assert erin.put("/v1/team/grants", json=grant).status_code == 200
        users = {u["user"]: u for u in erin.get("/v1/team/users").json()}
        assert users["dave"]["roles"] == {"github.com/acme/shop": "read"}
        assert "mdt_" not in json.dumps(users)
        dave_token = users["dave"]["tokens"][0]["id"]
        with team.client("dave") as dave:
            query = {"q": "stripe", "scope": SHOP_SSH}
            assert dave.get("/v1/recall", params=query).status_code == 200
            expired = erin.post(f"/v1/team/tokens/{dave_token}/expire", json={})
            assert expired.json()["state"] == "expired"
            answer = dave.get("/v1/recall", params=query)
            assert answer.status_code == 401
            assert "expired" in answer.text
        revoked = erin.post(f"/v1/team/tokens/{dave_token}/revoke", json={})
        assert revoked.json()["state"] == "revoked"
        dropped = erin.request(
            "DELETE", "/v1/team/grants", json={"user": "dave", "project": SHOP_SSH}
        )
        assert dropped.json()["had_one"] is True
    with uds_client(team.home) as admin:
        records = admin.get("/v1/audit", params={"limit": 500}).json()["items"]
    mine = [(r["event_type"], r["target_id"]) for r in records if r["actor"] == "team:erin"]
    assert ("team_user_add", "dave") in mine
    assert ("team_grant_put", "dave") in mine
    assert ("team_token_expire", "dave") in mine
    assert ("team_token_revoke", "dave") in mine
    assert ("team_grant_delete", "dave") in mine


def test_a_write_sent_again_with_its_request_id_lands_once(team: Team) -> None:
    """A developer's outbox sends a write again when its answer was lost: the server makes
    it once per `X-Memoryd-Request-Id` and answers the second time with the first slug."""
    body = {"type": "fact", "title": "Refunds go through the ledger service",
            "body": "Since the audit.", "scope": SHOP_SSH}  # fmt: skip
    again = {"X-Memoryd-Request-Id": uuid.uuid4().hex}
    with team.client("alice") as alice:
        first = alice.post("/v1/memories", json=body, headers=again)
        second = alice.post("/v1/memories", json=body, headers=again)
        other = alice.post("/v1/memories", json={**body, "allow_duplicate": True})
        listed = alice.get("/v1/memories", params={"scope": SHOP_SSH, "limit": 1000}).json()
    assert first.status_code == 201, first.text
    assert second.status_code == 200, second.text
    assert second.json()["meta"]["slug"] == first.json()["meta"]["slug"]
    assert other.status_code == 201  # no request id: an ordinary write
    titles = [m["title"] for m in listed["items"]]
    assert titles.count("Refunds go through the ledger service") == 2
    with team.client("alice") as alice:
        me = alice.get("/v1/team/me").json()
    assert me == {"user": "alice", "roles": {"github.com/acme/shop": "write"}}


def test_a_write_may_not_supersede_a_memory_of_another_project(team: Team) -> None:
    """Carol writes in her project; naming a shop memory in `supersedes` would demote it in
    a project she cannot even read: refused before anything is written."""
    made = record(team, "alice", "Invoices are numbered per tenant")
    assert made.status_code == 201, made.text
    shop_slug = made.json()["meta"]["slug"]
    body = {"type": "decision", "title": "Invoices are numbered globally", "body": "Simpler.",
            "scope": OTHER, "supersedes": [shop_slug]}  # fmt: skip
    with team.client("carol") as carol:
        refused = carol.post("/v1/memories", json=body)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "scope_not_granted"
        assert (
            "numbered globally"
            not in carol.get("/v1/recall", params={"q": "invoices numbered", "scope": OTHER}).text
        )
    with team.client("bob") as bob:
        hits = bob.get("/v1/recall", params={"q": "invoices numbered", "scope": SHOP_SSH})
    found = {h["slug"]: h for h in hits.json()["hits"]}
    assert found[shop_slug]["superseded_by"] is None


def test_team_status_counts_users_projects_and_the_graph(team: Team) -> None:
    assert record(team, "alice", "Status pages poll every 30 seconds").status_code == 201
    status = json.loads(team.cli("status", "--json"))
    assert status["users"] >= 3
    assert status["projects"]["github.com/acme/shop"] == "served"
    memories = int(status["graph size"].split()[0])
    assert memories >= 1


def test_a_backup_restores_into_a_new_team_server(
    team: Team, falkordb_url: str, tmp_path: Path
) -> None:
    """The last test of the module: it stops the server for the backup (the offline path,
    under the data dir's lock; test_team_ops.py backs a running server up), restores into a
    new data dir on a new graph and port, and the users' tokens and the team's memories are
    there; the server comes back as it was."""
    title = "Backups of the ledger run nightly at 02:00"
    assert record(team, "alice", title).status_code == 201
    archive = tmp_path / "team.tar.gz"
    team.stop()
    try:
        team.cli("backup", str(archive))
    finally:
        team.start()
    assert archive.stat().st_mode & 0o777 == 0o600
    restored = Team(tmp_path / "restored", "", tmp_path / "restored" / "tls" / "cert.pem",
                    dict(team.tokens))  # fmt: skip
    graph = f"team-{uuid.uuid4().hex}"
    out = restored.cli("restore", str(archive), "--port", str(free_port()),
                       "--falkordb-url", falkordb_url, "--graph-name", graph)  # fmt: skip
    assert "memories on graph" in out
    restored.start()
    try:
        with restored.client("bob") as bob:
            hits = bob.get("/v1/recall", params={"q": "ledger backups nightly", "scope": SHOP_SSH})
        assert hits.status_code == 200, hits.text
        assert title in [h["title"] for h in hits.json()["hits"]]
        assert {h["recorded_by"] for h in hits.json()["hits"] if h["title"] == title} == {"alice"}
    finally:
        restored.stop()
    with team.client("bob") as bob:  # the original is back
        assert bob.get("/v1/recall", params={"q": "ledger", "scope": SHOP_SSH}).status_code == 200
