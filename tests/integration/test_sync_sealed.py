"""Encrypted sync (issue 18): a sensitive memory leaves only as a `cipher_blob` in the
`encryption` block, sealed with a passphrase, and comes back sealed under the local key.

Round trip A → B with the plaintext canaries of the sensitive-scope test searched for in the
file and in B's whole data dir (UTF-8, UTF-16, base64); mcp-memory-service's importer sees
no sensitive memory; a wrong passphrase, a changed blob and a missing local key each stop
the import with the position or the fix named, and nothing written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.errors import InvalidInput, MissingKey, PolicyDenied
from memoryd.sensitive import envelope
from memoryd.sensitive.keys import KEYRING_SERVICE, derive, make_key
from memoryd.sync import cipher
from tests.e2e.test_sensitive_canary import CLIENT, HOST, leaks, secret_draft
from tests.integration.test_sync import draft, edit, opened, v5_import

runner = CliRunner()
PASSPHRASE = "correct horse battery staple"


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


class Exported(NamedTuple):
    out: Path
    memories: dict[str, tuple[dict[str, Any], str]]
    """slug → (frontmatter, body) of each sensitive memory, as A holds it."""
    recall: list[str]
    query: str


def sealed_export(tmp_path: Path, project: Path, other: Path) -> Exported:
    """Home A: a plain scope and a marked one with two secret memories, exported sealed."""
    out = tmp_path / "sync" / "memories.json"
    with opened(tmp_path / "a") as a:
        a.record(draft(other, "Docs deploy", "The docs deploy on Fridays."))
        a.sensitive_mark(project)
        slugs = [a.record(secret_draft(project, n)).slug for n in (1, 2)]
        left = a.sync_export(out)  # no passphrase: left out, and why
        assert (left.omitted_sensitive, left.encrypted) == (2, 0)
        assert left.omitted_reason is not None
        assert "passphrase" in left.omitted_reason
        refused = tmp_path / "refused.json"
        with pytest.raises(PolicyDenied, match="grant"):  # the scope key needs a grant
            a.sync_export(refused, passphrase=PASSPHRASE)
        assert not refused.exists()
        a.grant(project, "session")
        report = a.sync_export(out, passphrase=PASSPHRASE, include_audit_chain=True)
        assert (report.encrypted, report.omitted_sensitive, report.memories) == (2, 0, 1)
        query = f"{CLIENT} invoices on {HOST}"
        return Exported(
            out,
            {s: (a.get(s).meta.to_yaml_dict(), a.get(s).body) for s in slugs},
            [h.slug for h in a.recall(query, scope=project, track=False).hits],
            query,
        )


def test_a_sealed_round_trip_leaves_no_plaintext(
    tmp_path: Path, project: Path, other_project: Path, file_keyring: object
) -> None:
    out, memories, recall, query = sealed_export(tmp_path, project, other_project)
    data = json.loads(out.read_text(encoding="utf-8"))
    block = data["encryption"]
    assert block["mode"] == "passphrase"
    assert {"salt", "n", "r", "p"} <= set(block["kdf"])
    assert sorted(m["id"] for m in block["memories"]) == sorted(memories)
    assert data["export_metadata"]["encrypted_memories"] == 2
    # mcp-memory-service's importer sees the plain memory only: no sensitive one at all.
    v5 = v5_import(data)
    assert v5["imported"] == 1
    assert [m["content"] for m in v5["memories"]] == ["The docs deploy on Fridays."]
    assert not set(memories) & {m["id"] for m in data["memories"]}

    home_b = tmp_path / "b"
    with opened(home_b) as b:
        with pytest.raises(InvalidInput, match="passphrase"):
            b.sync_import(out)  # sealed memories need the passphrase
        assert not (home_b / "scopes").exists()
        dry = b.sync_import(out, passphrase=PASSPHRASE, dry_run=True)
        real = b.sync_import(out, passphrase=PASSPHRASE)
        assert dry.model_copy(update={"dry_run": False}) == real
        assert real.encrypted == 2
        assert len(real.scopes_marked) == 1  # B's scope made sensitive, a key made here
        assert set(memories) < set(real.added)
        assert len(real.added) == 3
        with pytest.raises(PolicyDenied):
            b.get(next(iter(memories)))  # sensitive on B too: read under a grant only
        b.grant(project, "session")
        got = {s: (b.get(s).meta.to_yaml_dict(), b.get(s).body) for s in memories}
        assert got == memories
        assert [h.slug for h in b.recall(query, scope=project, track=False).hits] == recall
        diff = b.sync_diff(out)  # without the passphrase: sealed ones are counted, not listed
        assert (diff.added, diff.removed, diff.changed) == ([], [], [])
        assert diff.sealed_not_compared == 2
        again = b.sync_import(out, passphrase=PASSPHRASE)  # idempotent
        assert (again.added, again.updated, again.conflicts) == ([], [], [])
        assert b.audit_verify().ok
        scope = real.scopes_marked[0]
        assert len(list((home_b / "scopes" / scope).rglob("*.md.enc"))) == 2
        assert not list((home_b / "scopes" / scope).rglob("*.md"))
    assert leaks(out.parent, home_b) == []


def test_a_wrong_passphrase_or_a_changed_blob_exits_2_naming_it(
    tmp_path: Path, project: Path, other_project: Path, file_keyring: object
) -> None:
    out = sealed_export(tmp_path, project, other_project).out
    home_c = tmp_path / "c"
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("not the passphrase\n")
    result = runner.invoke(
        app, ["sync", "import", "--from", str(out), "--passphrase-file", str(wrong),
              "--home", str(home_c)],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "encryption.memories[0]" in result.output
    assert "wrong passphrase" in result.output
    assert "nothing was imported" in result.output
    assert not (home_c / "scopes").exists()

    data = json.loads(out.read_text(encoding="utf-8"))
    blob = bytearray(base64.b64decode(data["encryption"]["memories"][1]["cipher_blob"]))
    blob[40] ^= 1  # one bit of the ciphertext
    data["encryption"]["memories"][1]["cipher_blob"] = base64.b64encode(bytes(blob)).decode()
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(data), encoding="utf-8")
    right = tmp_path / "right.txt"
    right.write_text(PASSPHRASE + "\n")
    result = runner.invoke(
        app, ["sync", "import", "--from", str(changed), "--passphrase-file", str(right),
              "--home", str(home_c)],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "encryption.memories[1]" in result.output
    assert "fails authentication" in result.output
    assert not (home_c / "scopes").exists()

    result = runner.invoke(  # the prompt, when no file is given
        app, ["sync", "import", "--from", str(out), "--home", str(home_c), "--json"],
        input=PASSPHRASE + "\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert '"encrypted": 2' in result.output

    home_a = str(tmp_path / "a")
    again = tmp_path / "again.json"
    result = runner.invoke(  # export: --encrypt asks twice (A's grant is still in force)
        app, ["sync", "export", "--out", str(again), "--encrypt", "--home", home_a],
        input=f"{PASSPHRASE}\n{PASSPHRASE}\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "sealed 2 sensitive memories" in result.output
    assert len(json.loads(again.read_text())["encryption"]["memories"]) == 2
    result = runner.invoke(app, ["sync", "export", "--out", str(again), "--home", home_a])
    assert result.exit_code == 0, result.output
    assert "left out 2 sensitive memories: no passphrase given" in result.output
    assert "encryption" not in json.loads(again.read_text())


def test_a_sensitive_local_scope_without_its_key_names_import_key(
    tmp_path: Path, project: Path, other_project: Path, file_keyring: object
) -> None:
    import keyring

    out = sealed_export(tmp_path, project, other_project).out
    home_d = tmp_path / "d"
    with opened(home_d) as d:
        marked = d.sensitive_mark(project)
        d.record(draft(project, "Billing", "A memory of D's own."))
    keyring.delete_password(KEYRING_SERVICE, f"{marked.scope_hash}:{marked.key_id}")
    before = files_under(home_d / "scopes")
    with opened(home_d) as d:
        with pytest.raises(MissingKey, match="key is not on this machine") as caught:
            d.sync_import(out, passphrase=PASSPHRASE)
        assert "memoryd sensitive import-key" in caught.value.hint
    assert files_under(home_d / "scopes") == before  # nothing written


def test_sealed_memories_do_not_land_in_a_plaintext_scope(
    tmp_path: Path, project: Path, other_project: Path, file_keyring: object
) -> None:
    out = sealed_export(tmp_path, project, other_project).out
    remote = json.loads(out.read_text())["encryption"]["memories"][0]["scope"]
    home_e = tmp_path / "e"
    with opened(home_e) as e:
        e.record(draft(other_project, "Plain", "A plaintext memory of E's."))
        before = files_under(home_e / "scopes")
        with pytest.raises(InvalidInput, match="plaintext memories") as caught:
            e.sync_import(out, passphrase=PASSPHRASE, map_scope={remote: str(other_project)})
        assert "memoryd sensitive mark" in caught.value.hint
        assert files_under(home_e / "scopes") == before


def test_a_sealed_memory_both_sides_changed_waits_sealed_in_conflicts(
    tmp_path: Path,
    project: Path,
    other_project: Path,
    file_keyring: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The body of a sensitive memory changed on both machines: the remote one waits in
    `_conflicts/` sealed under the local scope key (no plaintext there), `sync conflicts`
    lists it, and resolving it (under a grant) takes it."""
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    out, memories, _, _ = sealed_export(tmp_path, project, other_project)
    slug = sorted(memories)[0]
    home_b, b_file = tmp_path / "b", tmp_path / "b.json"
    monkeypatch.setenv("HOSTNAME", "device-b")
    with opened(home_b) as b:
        b.sync_import(out, passphrase=PASSPHRASE)
        b.grant(project, "session")
        edit(b, slug, t0 + timedelta(hours=1), body=f"B moved the {CLIENT} invoices.")
        b.sync_export(b_file, passphrase=PASSPHRASE)
    monkeypatch.setenv("HOSTNAME", "device-a")
    with opened(tmp_path / "a") as a:
        edit(a, slug, t0 + timedelta(hours=2), body=f"A moved the {CLIENT} invoices.")
        report = a.sync_import(b_file, passphrase=PASSPHRASE)
        assert [c.slug for c in report.conflicts] == [slug]
        [waiting] = a.sync_conflicts()
        assert (waiting.slug, waiting.source) == (slug, "device-b")
        assert waiting.path.endswith(".md.enc")
        assert leaks(tmp_path / "a" / "_conflicts") == []
        again = a.sync_import(b_file, passphrase=PASSPHRASE)  # the same conflict, once
        assert (again.updated, len(a.sync_conflicts())) == ([], 1)
        a.revoke(project)
        with pytest.raises(PolicyDenied):
            a.sync_resolve(slug, "remote")  # reading the sealed version needs a grant
        a.grant(project, "once")
        a.sync_resolve(slug, "remote")
        assert a.get(slug).body == f"B moved the {CLIENT} invoices."
        assert a.sync_conflicts() == []


def _block(path: Path) -> dict[str, Any]:
    block: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))["encryption"]
    return block


def test_the_same_state_seals_to_the_same_bytes_and_one_change_to_one_blob(
    tmp_path: Path, project: Path, other_project: Path, file_keyring: object
) -> None:
    """Issue 18's deterministic output with an encryption block: the data dir's export salt
    and synthetic nonces give byte-identical files; editing one sealed memory changes its
    blob only; the file still imports."""
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    first, second, third = (tmp_path / f"{n}.json" for n in ("first", "second", "third"))
    with opened(tmp_path / "a") as a:
        a.record(draft(other_project, "Docs deploy", "The docs deploy on Fridays."))
        a.sensitive_mark(project)
        slugs = [a.record(secret_draft(project, n)).slug for n in (1, 2, 3)]
        a.grant(project, "session")
        a.sync_export(first, passphrase=PASSPHRASE)
        a.sync_export(second, passphrase=PASSPHRASE)
        assert first.read_bytes() == second.read_bytes()
        edit(a, slugs[1], t0, body=f"The {CLIENT} invoices moved to a new host.")
        a.sync_export(third, passphrase=PASSPHRASE)
    before, after = _block(first), _block(third)
    assert (before["version"], before["nonce"]) == (2, "hmac-sha256-synthetic")
    assert before["kdf"] == after["kdf"]  # the data dir's salt, kept
    assert (tmp_path / "a" / "sync" / "export-salt").stat().st_size == 16
    changed = [
        old["id"] for old, new in zip(before["memories"], after["memories"], strict=True)
        if old != new
    ]  # fmt: skip
    assert changed == [slugs[1]]
    nonces = {base64.b64decode(m["cipher_blob"])[14:26] for m in after["memories"]}
    assert len(nonces) == 3  # one per plaintext
    with opened(tmp_path / "b") as b:
        b.sync_import(third, passphrase=PASSPHRASE)
        b.grant(project, "session")
        assert b.get(slugs[1]).body == f"The {CLIENT} invoices moved to a new host."
        assert b.get(slugs[0]).body == secret_draft(project, 1).body
    assert leaks(tmp_path / "b") == []


def test_a_file_sealed_the_first_way_still_imports(
    tmp_path: Path, project: Path, other_project: Path, file_keyring: object
) -> None:
    """Version 1 blocks (no `version`: scrypt's output the AES key, random salt and nonces)
    are still read."""
    out, memories, _, _ = sealed_export(tmp_path, project, other_project)
    data = json.loads(out.read_text(encoding="utf-8"))
    block = data["encryption"]
    keys = cipher.key_for(cipher.read_block(block), PASSPHRASE)
    salt = os.urandom(16)
    old_key = make_key(derive(PASSPHRASE, salt))
    for entry in block["memories"]:
        plaintext = envelope.open_(
            base64.b64decode(entry["cipher_blob"]), keys.aead, entry["scope"], entry["id"]
        )
        blob = envelope.seal(plaintext, old_key, entry["scope"], entry["id"])
        entry["cipher_blob"] = base64.b64encode(blob).decode()
    del block["version"], block["nonce"]
    block["kdf"]["salt"] = base64.b64encode(salt).decode()
    old = tmp_path / "v1.json"
    old.write_text(json.dumps(data), encoding="utf-8")
    with opened(tmp_path / "b") as b:
        assert b.sync_import(old, passphrase=PASSPHRASE).encrypted == 2
        b.grant(project, "session")
        assert {s: (b.get(s).meta.to_yaml_dict(), b.get(s).body) for s in memories} == memories
    block["version"] = 3
    newer = tmp_path / "v3.json"
    newer.write_text(json.dumps(data), encoding="utf-8")
    with opened(tmp_path / "c") as c, pytest.raises(InvalidInput, match="newer memoryd"):
        c.sync_import(newer, passphrase=PASSPHRASE)


def test_an_open_conflict_of_a_sealed_memory_travels_without_its_body(
    tmp_path: Path,
    project: Path,
    other_project: Path,
    file_keyring: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As for a plain memory (test_sync's open-conflict test), A's export names the body it
    disputes, so B keeps its own and opens the conflict too; the mark is an HMAC under the
    file's key, not the body's sha256 (which would confirm a guessed body)."""
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    a_file, b_file = tmp_path / "a.json", tmp_path / "b.json"
    b_body = f"B: the {CLIENT} invoices are generated weekly."
    a_body = f"A: the {CLIENT} invoices are generated daily."
    monkeypatch.setenv("HOSTNAME", "device-a")
    with opened(tmp_path / "a") as a:
        a.sensitive_mark(project)
        slug = a.record(secret_draft(project, 1)).slug
        a.grant(project, "session")
        a.sync_export(a_file, passphrase=PASSPHRASE)
    monkeypatch.setenv("HOSTNAME", "device-b")
    with opened(tmp_path / "b") as b:
        b.sync_import(a_file, passphrase=PASSPHRASE)
        b.grant(project, "session")
        edit(b, slug, t0 + timedelta(hours=1), body=b_body)
        b.sync_export(b_file, passphrase=PASSPHRASE)
    monkeypatch.setenv("HOSTNAME", "device-a")
    with opened(tmp_path / "a") as a:
        a.grant(project, "session")
        edit(a, slug, t0 + timedelta(hours=2), body=a_body)
        assert [c.slug for c in a.sync_import(b_file, passphrase=PASSPHRASE).conflicts] == [slug]
        a.sync_export(a_file, passphrase=PASSPHRASE)
    [entry] = _block(a_file)["memories"]
    [mark] = entry["open_conflicts"]
    assert mark["source"] == "device-b"
    assert re.fullmatch(r"[0-9a-f]{64}", mark["body_hmac"])
    assert mark["body_hmac"] != hashlib.sha256(b_body.encode()).hexdigest()
    assert hashlib.sha256(b_body.encode()).hexdigest() not in a_file.read_text()
    assert leaks(a_file.parent) == []
    monkeypatch.setenv("HOSTNAME", "device-b")
    with opened(tmp_path / "b") as b:
        b.grant(project, "session")
        report = b.sync_import(a_file, passphrase=PASSPHRASE)
        assert b.get(slug).body == b_body  # not silently replaced by A's
        assert [c.slug for c in report.conflicts] == [slug]
        [open_] = b.sync_conflicts()
        assert (open_.source, open_.path.endswith(".md.enc")) == ("device-a", True)
        again = b.sync_import(a_file, passphrase=PASSPHRASE)
        assert (again.updated, len(b.sync_conflicts())) == ([], 1)
