"""Team memory end to end on one machine: a FalkorDB server, a team server (`serve --team`),
and two developer daemons (Kuzu, each its own data dir and token) that joined it.

Alice records a decision in the shop (her clone's remote in ssh form); Bob's inject hook for a
related prompt in his clone (https form: the same project key) returns it, naming Alice, and
his recall merges it with his own memory of the project by score, each hit saying where it
came from; a personal project stays on Alice's machine. With the team server stopped, 50
team memories Alice records wait in her outbox (the CLI says how many), and once the server
is back every one of them lands, once; meanwhile Bob's recall answers from the team hits he
last saw, and says so."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from selenium import webdriver
from selenium.webdriver.common.by import By

from memoryd.keyrings import TEST_KEYRING_ENV
from tests.cli_forks import forked_commands
from tests.conftest import isolate_environment
from tests.daemon_harness import Daemon, free_port, uds_client
from tests.e2e.test_graph_page import browser, needs_browser, open_page, wait_for  # noqa: F401
from tests.integration.test_capture import ClaudeTranscript, capture
from tests.pins import PINNED_ENV
from tests.team_harness import Team
from tests.waiting import wait_until

SHOP_SSH = "git@github.com:acme/shop.git"
SHOP_HTTPS = "https://github.com/acme/shop"
VAULT = "git@github.com:acme/vault.git"
CANARY = "Zorblax7731"


@dataclass
class Developer:
    name: str
    home: Path
    clone: Path
    daemon: Daemon
    command: list[str]
    """How a command runs: the shim of the module's command server (`tests.cli_forks`)."""
    slugs: dict[str, str] = field(default_factory=dict)

    def memoryd(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        result = subprocess.run(
            [*self.command, *args, "--home", str(self.home)],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            env={**PINNED_ENV, **os.environ},
            check=False,
        )
        assert (result.returncode == 0) == ok, result.stderr
        return result.stdout if ok else result.stderr

    def note(self, name: str, title: str, scope: Path, *more: str) -> None:
        """A personal memory recorded before the daemon joined (embedded, no daemon)."""
        self.slugs[name] = self.memoryd("record", "--type", "decision", "--title", title,
                                        "--body", f"{title}.", "--scope", str(scope),
                                        *more).strip()  # fmt: skip

    def record(self, title: str, scope: Path) -> tuple[int, dict[str, object]]:
        body = {"type": "decision", "title": title, "body": f"{title}. Agreed in review.",
                "scope": str(scope)}  # fmt: skip
        with uds_client(self.home) as client:
            answer = client.post("/v1/memories", json=body)
        return answer.status_code, answer.json()


def clone(root: Path, name: str, remote: str | None) -> Path:
    path = root / name
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if remote:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", remote], check=True)
    return path


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, falkordb_url: str
) -> Iterator[tuple[Team, Developer, Developer]]:
    root = tmp_path_factory.mktemp("teamworld")
    with pytest.MonkeyPatch.context() as patch, contextlib.ExitStack() as stack:
        isolate_environment(patch, root)
        patch.setenv("MEMORYD_DAEMON__AUTOSTART", "0")
        # the scope keys of a sensitive project in a file keyring (as tests.conftest's)
        patch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
        patch.setenv(TEST_KEYRING_ENV, "keyrings.alt.file.PlaintextKeyring")
        # Each CLI command is a process forked from one warmed-up interpreter: a fresh
        # `python -m memoryd` would import memoryd (and build the extraction pipelines) anew.
        bin_dir = root / "bin"
        bin_dir.mkdir()
        commands = forked_commands(
            bin_dir / "memoryd", root / "cli.sock", {**PINNED_ENV, **os.environ}
        )
        memoryd = [str(stack.enter_context(commands))]
        team = Team.init(root / "server", falkordb_url, f"team-{uuid.uuid4().hex}", memoryd)
        for user in ("alice", "bob"):
            team.add_user(user)
            team.cli("grant", user, SHOP_SSH, "--role", "write")
        team.cli("grant", "alice", VAULT, "--role", "write")
        team.start()
        developers = []
        try:
            for user, remote in (("alice", SHOP_SSH), ("bob", SHOP_HTTPS)):
                home = root / f"{user}-home"
                developers.append(
                    Developer(  # on TCP too, for the page
                        user,
                        home,
                        clone(root, f"{user}-shop", remote),
                        Daemon(home, free_port()),
                        memoryd,
                    )
                )
            alice, bob = developers
            # Personal memories from before the project was shared: they stay theirs
            bob.note("3ds", "Card payments need the 3-D Secure flow on Stripe", bob.clone)
            bob.note("react", "The dashboard uses React", bob.clone)
            alice.note("jenkins", "Deploys go through Jenkins", alice.clone)
            alice.note("actions", "Deploys moved from Jenkins to GitHub Actions", alice.clone,
                       "--supersedes", alice.slugs["jenkins"])  # fmt: skip
            vault = clone(root, "alice-vault", VAULT)
            alice.memoryd("sensitive", "mark", str(vault))
            alice.note("canary", f"The {CANARY} signing key rotates monthly", vault)
            alice.slugs["vault"] = str(vault)
            for developer in developers:
                token = root / f"{developer.name}.token"
                token.write_text(team.tokens[developer.name])
                ca, project = str(team.cert), str(developer.clone)
                out = developer.memoryd("team", "join", team.url, "--token-file", str(token),
                                        "--ca", ca, "--project", project)  # fmt: skip
                assert "github.com/acme/shop: write (linked)" in out
                developer.daemon.start()
            yield team, alice, bob
        finally:
            for developer in developers:
                developer.daemon.kill()
            team.stop()


def test_a_decision_alice_records_reaches_bobs_inject_naming_her(
    world: tuple[Team, Developer, Developer],
) -> None:
    team, alice, bob = world
    title = "Payments moved from Stripe Checkout to Stripe Elements"
    status, made = alice.record(title, alice.clone)
    assert status == 201, made
    slug = made["meta"]["slug"]  # type: ignore[index]
    with team.client("bob") as direct:  # it is the team's, recorded by Alice
        assert direct.get(f"/v1/memories/{slug}").json()["recorded_by"] == "alice"
    with uds_client(alice.home) as local:  # not in Alice's own stores: a get asks the team
        assert slug not in local_slugs(local, alice.clone)
        assert local.get(f"/v1/memories/{slug}").json()["source"] == "team"

    payload = {"hook_event_name": "UserPromptSubmit", "cwd": str(bob.clone),
               "prompt": "how do we take card payments with Stripe now?"}  # fmt: skip
    injected = bob.memoryd("inject", "--source=claude-code", stdin=json.dumps(payload))
    assert title in injected
    assert "recorded by alice" in injected

    with uds_client(bob.home) as local:
        recalled = local.get("/v1/recall", params={"q": "stripe payments", "scope": str(bob.clone)})
    assert recalled.status_code == 200, recalled.text
    hits = recalled.json()["hits"]
    sources = {h["title"]: (h["source"], h["recorded_by"]) for h in hits}
    assert sources[title] == ("team", "alice")
    assert sources["Card payments need the 3-D Secure flow on Stripe"] == ("personal", None)
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)  # one list, by calibrated score

    # the CLI's recall (through Bob's daemon) shows where each hit came from, and who
    table = bob.memoryd("recall", "stripe payments", "--scope", str(bob.clone))
    header = next(line for line in table.splitlines() if "relevance" in line)
    assert "source" in header, table
    assert "recorded by" in header, table
    row = next(line for line in table.splitlines() if slug in line)
    assert "team" in row, table
    assert "alice" in row, table
    listed = json.loads(bob.memoryd("recall", "stripe payments", "--scope", str(bob.clone),
                                    "--json"))  # fmt: skip
    origin = {h["slug"]: (h["source"], h["recorded_by"]) for h in listed["hits"]}
    assert origin[slug] == ("team", "alice")
    assert origin[bob.slugs["3ds"]] == ("personal", None)


def test_another_clone_of_the_shop_is_the_same_team_project(
    world: tuple[Team, Developer, Developer], tmp_path: Path
) -> None:
    """A clone the join never saw (another path, the remote spelled another way) is the
    shop: the CLI's recall and the inject hook, which name it by its scope hash, reach the
    team, and a record there goes to the team."""
    team, alice, bob = world
    title = "Invoices are rendered to PDF with WeasyPrint"
    status, made = alice.record(title, alice.clone)
    assert status == 201, made
    slug = made["meta"]["slug"]  # type: ignore[index]
    second = clone(tmp_path, "shop-again", "ssh://git@github.com:22/acme/shop")
    listed = json.loads(bob.memoryd("recall", "invoices pdf", "--scope", str(second), "--json"))
    origin = {h["slug"]: (h["source"], h["recorded_by"]) for h in listed["hits"]}
    assert origin.get(slug) == ("team", "alice"), listed
    payload = {"hook_event_name": "UserPromptSubmit", "cwd": str(second / "src"),
               "prompt": "how are the invoices rendered to PDF?"}  # fmt: skip
    (second / "src").mkdir()
    injected = bob.memoryd("inject", "--source=claude-code", stdin=json.dumps(payload))
    assert title in injected
    assert "recorded by alice" in injected
    status, made = bob.record("Invoice numbers restart every fiscal year", second)
    assert status == 201, made
    with team.client("alice") as direct:
        got = direct.get(f"/v1/memories/{made['meta']['slug']}")  # type: ignore[index]
    assert got.status_code == 200, got.text
    assert got.json()["recorded_by"] == "bob"


async def _mcp_calls(home: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Each tool's structured answer (or its error text), through the SDK's client on the
    developer daemon's own `/mcp` (its Unix socket)."""
    transport = httpx2.AsyncHTTPTransport(uds=str(home / "memoryd.sock"))
    http = httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(60.0))
    out: list[Any] = []
    async with (
        http,
        Client(streamable_http_client("http://localhost/mcp", http_client=http)) as mcp,
    ):
        for tool, args in calls:
            result = await mcp.call_tool(tool, args)
            text = "".join(getattr(c, "text", "") for c in result.content)
            out.append(f"error: {text}" if result.is_error else json.loads(text))
    return out


def test_the_developer_daemons_own_mcp_tools_reach_the_team(
    world: tuple[Team, Developer, Developer], tmp_path: Path
) -> None:
    """An agent using MCP against Bob's daemon: remember in the shop is the team's (recorded
    by Bob), recall there merges Alice's team memory with Bob's own; a personal project
    stays on his machine."""
    team, alice, bob = world
    title = "Webhooks are verified with the Stripe signing secret"
    status, made = alice.record(title, alice.clone)
    assert status == 201, made
    personal = clone(tmp_path, "notes", None)
    remembered, recalled, mine = anyio.run(_mcp_calls, bob.home, [
        ("remember", {"type": "decision", "title": "Stripe webhooks retry for three days",
                      "body": "Stripe retries a failed webhook for three days.",
                      "scope": str(bob.clone)}),
        ("recall", {"query": "stripe webhooks", "scope": str(bob.clone)}),
        ("remember", {"type": "fact", "title": "My notes use Obsidian", "body": "Obsidian.",
                      "scope": str(personal)}),
    ])  # fmt: skip
    assert remembered["team"] == "github.com/acme/shop", remembered
    with team.client("alice") as direct:
        got = direct.get(f"/v1/memories/{remembered['slug']}")
    assert got.status_code == 200, got.text
    assert got.json()["recorded_by"] == "bob"
    with uds_client(bob.home) as local:  # the team's, not in Bob's own stores
        assert remembered["slug"] not in local_slugs(local, bob.clone)
        assert local.get(f"/v1/memories/{mine['slug']}").status_code == 200
    assert "team" not in mine
    origin = {h["title"]: (h["source"], h["recorded_by"]) for h in recalled["hits"]}
    assert origin[title] == ("team", "alice"), recalled
    assert origin["Card payments need the 3-D Secure flow on Stripe"] == ("personal", None)
    scores = [h["score"] for h in recalled["hits"]]
    assert scores == sorted(scores, reverse=True)
    # the agent reads the team hit in full, as it would its own
    [full, missing] = anyio.run(_mcp_calls, bob.home, [
        ("get_memory", {"slug": made["meta"]["slug"]}),  # type: ignore[index]
        ("get_memory", {"slug": "no-such-memory-anywhere"}),
    ])  # fmt: skip
    assert (full["source"], full["recorded_by"]) == ("team", "alice"), full
    assert full["meta"]["title"] == title
    assert missing.startswith("error:")
    assert "here or in the team" in missing


def local_slugs(client: httpx.Client, clone: Path) -> set[str]:
    """The slugs a developer daemon holds in its own stores for the project (a list is never
    forwarded)."""
    rows = client.get("/v1/memories", params={"scope": str(clone), "limit": 1000}).json()
    return {row["slug"] for row in rows["items"]}


Tool = tuple[str, dict[str, Any], str]


def _captured_session(
    bob: Developer, session_id: str, prompt: str, tools: list[Tool], said: list[str]
) -> str:
    """A Claude Code session in Bob's clone, captured by the hook with his daemon up: its
    slug once the daemon has filed it (a session memory of his own)."""
    agent = bob.home.parent / "agent"
    agent.mkdir(exist_ok=True)
    made = ClaudeTranscript(agent / f"{session_id}.jsonl", session_id, str(bob.clone))
    made.prompt(prompt)
    for name, tool_input, result in tools:
        made.tool(name, tool_input, result)
    for line in said:
        made.say(line)
    capture(bob.home, "claude-code", made.payload("Stop"))

    def filed() -> str | None:
        with uds_client(bob.home) as local:
            rows = local.get("/v1/memories", params={"scope": str(bob.clone), "type": "session",
                                                      "limit": 100}).json()["items"]  # fmt: skip
        return next((r["slug"] for r in rows if session_id in r["slug"]), None)

    slug = wait_until(filed, what="the captured session filed", timeout_s=120, every_s=0.5)
    assert slug is not None
    return slug


def test_a_captured_session_stays_personal_until_the_review_queue_promotes_it_to_the_team(
    world: tuple[Team, Developer, Developer],
) -> None:
    team, _, bob = world
    session = _captured_session(
        bob, "solid-session",
        "The dashboard re-renders too much. Try Solid on the charts page and compare.",
        [("Bash", {"command": "pnpm add solid-js@1.8.17"}, "added 1 package"),
         ("Edit", {"file_path": str(bob.clone / "dashboard/src/charts/Chart.tsx")}, "ok")],
        ["We switched the dashboard from React to Solid because the charts page went from 38"
         " to 9 re-renders per update and the bundle shrank by 41 KB.",
         "Going forward new components in dashboard/ are written in Solid."],
    )  # fmt: skip
    with team.client("alice") as direct:  # captured in the shop, and still Bob's alone
        query = {"q": "dashboard solid re-renders", "scope": SHOP_SSH}
        hits = direct.get("/v1/recall", params=query).json()["hits"]
    assert not [h for h in hits if "Solid" in f"{h['title']} {h['snippet']}"], hits
    with uds_client(bob.home) as local:
        scored = local.post(f"/v1/memories/{session}/analyze", json={"mode": "heuristic"})
        assert scored.status_code == 200, scored.text
        proposal = scored.json()
    assert proposal["proposal"]["proposed_supersedes"] == [bob.slugs["react"]], proposal
    promoted = json.loads(bob.memoryd("promote", str(proposal["promotion_id"]), "--team",
                                      "--json"))  # fmt: skip
    assert promoted["status"] == "approved", promoted
    assert promoted["team_slug"], promoted
    with team.client("alice") as direct:
        copy = direct.get(f"/v1/memories/{promoted['team_slug']}").json()
        older = direct.get(f"/v1/memories/{copy['meta']['supersedes'][0]}").json()
    assert copy["recorded_by"] == "bob"
    assert older["meta"]["title"] == "The dashboard uses React"  # the chain came with it
    with uds_client(bob.home) as local:  # promoted here too; the session itself never left
        mine = local.get(f"/v1/memories/{promoted['promoted_slug']}").json()
        assert local.get(f"/v1/memories/{session}").status_code == 200
    assert copy["meta"]["title"] == mine["meta"]["title"]

    # the Review page's API promotes to the team the same way
    second = _captured_session(
        bob, "pin-session",
        "The nightly build crashes in the payment tests after the bump. Find out why.",
        [("Bash", {"command": "pytest -q tests/payments"}, "2 failed: AttributeError"),
         ("Edit", {"file_path": str(bob.clone / "requirements.txt")}, "ok")],
        ["We pinned stripe-python to 7.4.0 because 8.0 changed the error classes the retry"
         " code catches.",
         "Going forward, never bump stripe-python without running the payment tests first."],
    )  # fmt: skip
    with uds_client(bob.home) as local:
        scored = local.post(f"/v1/memories/{second}/analyze", json={"mode": "heuristic"})
        pid = scored.json()["promotion_id"]
        done = local.post(f"/v1/promotions/{pid}/promote", json={"team": True})
    assert done.status_code == 200, done.text
    with team.client("alice") as direct:
        copy = direct.get(f"/v1/memories/{done.json()['team_slug']}").json()
    assert copy["recorded_by"] == "bob"
    assert "stripe-python" in copy["body"], copy


def _scored(bob: Developer, session_id: str, decision: str) -> int:
    """A captured session in Bob's clone, scored: its pending promotion's id."""
    slug = _captured_session(
        bob, session_id,
        "The nightly build crashes in the upload tests after the bump. Find out why.",
        [("Bash", {"command": "pytest -q tests/uploads"}, "2 failed: AttributeError"),
         ("Edit", {"file_path": str(bob.clone / "requirements.txt")}, "ok")],
        [decision, "Going forward, never bump it without running the upload tests first."],
    )  # fmt: skip
    with uds_client(bob.home) as local:
        scored = local.post(f"/v1/memories/{slug}/analyze", json={"mode": "heuristic"})
    assert scored.status_code == 200, scored.text
    pid = scored.json()["promotion_id"]
    assert pid is not None, scored.json()
    return int(pid)


@needs_browser
def test_the_review_page_promotes_to_the_team_and_shows_the_refusal(
    world: tuple[Team, Developer, Developer],
    browser: webdriver.Chrome,  # noqa: F811  (the fixture imported above)
) -> None:
    team, _, bob = world
    shared = _scored(
        bob,
        "upload-session",
        "We pinned boto3 to 1.34.0 because 1.35 changed"
        " the multipart defaults the image uploads rely on.",
    )
    with uds_client(bob.home) as local:
        asked = local.get(f"/v1/promotions/{shared}").json()
    assert asked["team_project"] == "github.com/acme/shop"
    assert bob.daemon.port is not None
    url = f"http://127.0.0.1:{bob.daemon.port}/#token={bob.daemon.token()}&review=1"
    card = f'#promotions .promotion[data-id="{shared}"]'
    open_page(browser, url)
    wait_for("the promotion's card", lambda: browser.find_elements(By.CSS_SELECTOR, card))
    button = browser.find_element(By.CSS_SELECTOR, f"{card} button.approve-team")
    assert "github.com/acme/shop" in str(button.get_attribute("title"))
    button.click()
    outcome = wait_for("the team's answer", lambda: browser.execute_script(
        "const c = document.querySelector(arguments[0]);"
        " return c.dataset.team && c.querySelector('.outcome').textContent", card))  # fmt: skip
    assert "shared with github.com/acme/shop as " in outcome, outcome
    team_slug = outcome.rsplit(" ", 1)[1]
    with team.client("alice") as direct:
        copy = direct.get(f"/v1/memories/{team_slug}").json()
    assert copy["recorded_by"] == "bob"
    assert "boto3" in copy["body"], copy

    # with the team server away the share is refused: the card says so, the memory personal
    refused = _scored(
        bob,
        "upload-session-2",
        "We pinned pillow to 10.3.0 because 10.4 changed"
        " the resize filters the thumbnail code calls.",
    )
    card = f'#promotions .promotion[data-id="{refused}"]'
    team.stop()
    try:
        open_page(browser, url)
        wait_for("the second card", lambda: browser.find_elements(By.CSS_SELECTOR, card))
        browser.find_element(By.CSS_SELECTOR, f"{card} button.approve-team").click()
        outcome = wait_for("the refusal", lambda: browser.execute_script(
            "const c = document.querySelector(arguments[0]);"
            " return c.dataset.team && c.querySelector('.outcome').textContent", card))  # fmt: skip
    finally:
        team.start()
    assert outcome.startswith("not shared with the team: promoted as "), outcome
    assert "which stays personal" in outcome, outcome
    assert browser.find_element(By.CSS_SELECTOR, card).get_attribute("data-status") == "approved"
    errors = browser.get_log("browser")  # the refused POST is logged by chromium, no script error
    assert [e for e in errors if e["level"] == "SEVERE" and "/promote" not in e["message"]] == []


def test_a_personal_project_stays_on_the_developers_machine(
    world: tuple[Team, Developer, Developer], tmp_path: Path
) -> None:
    team, alice, _ = world
    personal = clone(tmp_path, "dotfiles", None)
    status, made = alice.record("Dotfiles use chezmoi templates", personal)
    assert status == 201, made
    with uds_client(alice.home) as local:
        assert local.get(f"/v1/memories/{made['meta']['slug']}").status_code == 200  # type: ignore[index]
    canary = b"chezmoi"
    for path in team.home.rglob("*"):
        if path.is_file():
            assert canary not in path.read_bytes(), path


def test_sharing_copies_personal_memories_with_their_chain_and_never_a_sensitive_scope(
    world: tuple[Team, Developer, Developer],
) -> None:
    team, alice, _ = world
    dry = json.loads(alice.memoryd("share", "--scope", str(alice.clone), "--dry-run", "--json"))
    assert [r["slug"] for r in dry] == [alice.slugs["jenkins"], alice.slugs["actions"]]
    assert {r["team_slug"] for r in dry} == {None}
    with team.client("alice") as direct:
        query = {"q": "deploys jenkins", "scope": SHOP_SSH}
        assert direct.get("/v1/recall", params=query).json()["hits"] == []  # a dry run sent none

    shared = json.loads(alice.memoryd("share", alice.slugs["actions"], "--json"))
    copies = {r["slug"]: r["team_slug"] for r in shared}
    assert list(copies) == [
        alice.slugs["jenkins"],
        alice.slugs["actions"],
    ]  # the chain, oldest first
    with team.client("bob") as direct:
        newer = direct.get(f"/v1/memories/{copies[alice.slugs['actions']]}").json()
    assert newer["meta"]["supersedes"] == [copies[alice.slugs["jenkins"]]]
    assert newer["recorded_by"] == "alice"
    again = json.loads(alice.memoryd("share", alice.slugs["actions"], "--json"))
    assert {r["slug"]: r["team_slug"] for r in again} == copies  # sharing again lands nothing twice

    vault = alice.slugs["vault"]
    for args in (("--scope", vault), (alice.slugs["canary"],), ("--scope", vault, "--dry-run")):
        refused = alice.memoryd("share", *args, ok=False)
        assert "sensitive scope" in refused
        assert "never leaves this machine" in refused
    status, made = alice.record(f"{CANARY} vault: the HSM holds the root key", Path(vault))
    assert status == 201, made  # recorded, sealed, here: a sensitive scope is never forwarded
    for path in team.home.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


def test_team_writes_wait_while_the_server_is_away_and_land_once(
    world: tuple[Team, Developer, Developer],
) -> None:
    team, alice, bob = world
    team.stop()
    titles = [f"Outage decision {i:02d}: retry payouts with backoff step {i}" for i in range(50)]
    try:
        for title in titles:
            status, answer = alice.record(title, alice.clone)
            assert status == 202, answer
            assert answer["queued"] is True
        cli_title, where = titles[-1] + " (CLI)", str(alice.clone)
        queued = alice.memoryd("record", "--type", "fact", "--title", cli_title,
                               "--body", "Through the CLI.", "--scope", where)  # fmt: skip
        assert queued.startswith("team-queued-")  # the CLI says where it went
        titles.append(cli_title)
        status_line = alice.memoryd("team", "status", "--json")
        assert json.loads(status_line)["waiting"] == 51
        # Bob's recall falls back to what he last saw of the team, and says so
        with uds_client(bob.home) as local:
            query = {"q": "stripe payments", "scope": str(bob.clone)}
            answer = local.get("/v1/recall", params=query).json()
        assert any("unreachable" in note for note in answer["notes"]), answer["notes"]
        cached = {h["title"]: h["recorded_by"] for h in answer["hits"]
                  if h["source"] == "team-cache"}  # fmt: skip
        assert cached["Payments moved from Stripe Checkout to Stripe Elements"] == "alice"
    finally:
        team.start()
    wait_until(
        lambda: json.loads(alice.memoryd("team", "status", "--json"))["waiting"] == 0,
        what="alice's outbox to drain",
        timeout_s=180,
        every_s=1.0,
    )
    with team.client("alice") as direct:
        listed = direct.get("/v1/memories", params={"scope": SHOP_SSH, "limit": 1000}).json()
    landed = [m["title"] for m in listed["items"] if m["title"].startswith("Outage decision")]
    assert sorted(landed) == sorted(titles)  # none lost, none twice
