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

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memoryd.sensitive.keys import TEST_KEYRING_ENV
from tests.conftest import isolate_environment
from tests.daemon_harness import Daemon, uds_client
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
    slugs: dict[str, str] = field(default_factory=dict)

    def memoryd(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "memoryd", *args, "--home", str(self.home)],
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
    with pytest.MonkeyPatch.context() as patch:
        isolate_environment(patch, root)
        patch.setenv("MEMORYD_DAEMON__AUTOSTART", "0")
        # the scope keys of a sensitive project in a file keyring (as tests.conftest's)
        patch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
        patch.setenv(TEST_KEYRING_ENV, "keyrings.alt.file.PlaintextKeyring")
        team = Team.init(root / "server", falkordb_url, f"team-{uuid.uuid4().hex}")
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
                    Developer(user, home, clone(root, f"{user}-shop", remote), Daemon(home))
                )
            alice, bob = developers
            # Personal memories from before the project was shared: they stay theirs
            bob.note("3ds", "Card payments need the 3-D Secure flow on Stripe", bob.clone)
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
    with uds_client(alice.home) as local:  # not in Alice's own stores
        assert local.get(f"/v1/memories/{slug}").status_code == 404

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
        cached = [h for h in answer["hits"] if h["source"] == "team-cache"]
        assert [h["recorded_by"] for h in cached] == ["alice"]
        assert "Stripe Elements" in cached[0]["title"]
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
