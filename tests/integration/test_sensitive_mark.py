"""Marking a scope sensitive over real stores: files sealed, plaintext gone from the vault,
graph, index, queues and governance.db; writes in a marked scope; key rotation, export and
import through the CLI; a missing key; no keyring."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings
from memoryd.errors import InvalidInput, KeyringUnavailable, MissingKey, NotFound, PolicyDenied
from memoryd.inbox import Inbox, IndexRequest, now_ts
from memoryd.keyrings import TEST_KEYRING_ENV
from memoryd.models import MemoryDraft, PromotionProposal
from memoryd.scope import SENSITIVE_MARKER
from memoryd.sensitive import envelope
from memoryd.sensitive.files import encrypted_files, plain_files
from memoryd.sensitive.keys import PASSPHRASE_ENV, KeyStore
from memoryd.service import MemoryService
from memoryd.wiring import open_service

CANARIES = ("Zorblax7731", "quuxhost-4417.internal", "Client Vellacorp")
runner = CliRunner()


def draft(project: Path, title: str, body: str, **kw: object) -> MemoryDraft:
    return MemoryDraft.model_validate(
        {"type": "decision", "title": title, "body": body, "scope_path": project, **kw}
    )


def encodings(canary: str) -> Iterator[bytes]:
    """The canary as UTF-8 (any case), UTF-16 and base64 at each of the three alignments."""
    raw = canary.encode("utf-8")
    yield raw.lower()
    yield canary.encode("utf-16-le")
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw)
        yield encoded[4 if pad else 0 : -4]


def leaks(root: Path, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Every file under `root` holding a canary, in any of the encodings."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if any(part in skip for part in path.relative_to(root).parts):
            continue
        data = path.read_bytes()
        lowered = data.lower()
        for canary in CANARIES:
            for needle in encodings(canary):
                if needle in (lowered if needle.islower() else data):
                    found.append(f"{path.relative_to(root)}: {canary}")
    return found


def plant(svc: MemoryService, project: Path) -> list[str]:
    """Memories whose title, body, tags, triggers and entities carry the canaries."""
    slugs = []
    for i, canary in enumerate(CANARIES):
        memory = svc.record(
            draft(
                project,
                f"Deploy notes {canary}",
                f"We deploy {canary} through PostgreSQL on quuxhost-4417.internal; see"
                f" src/{CANARIES[0].lower()}/deploy.py. Number {i}.",
                tags=[CANARIES[0].lower()],
                triggers=[f"{CANARIES[0]} deploy"],
            )
        )
        slugs.append(memory.slug)
    svc.governance.propose_promotion(
        PromotionProposal.model_validate(
            {
                "source_slug": slugs[0],
                "source_title": f"Deploy notes {CANARIES[0]}",
                "source_fingerprint": "0" * 40,
                "scope_hash": svc.scope_show(project).scope_hash,
                "proposed_type": "decision",
                "proposed_title": f"Always deploy {CANARIES[0]}",
                "proposed_body": f"{CANARIES[1]} is the host",
                "proposed_triggers": [CANARIES[0]],
                "dura": {"D": 0.9, "U": 0.9, "R": 0.9, "A": 0.9},
            }
        ),
        svc.clock(),
    )
    scope_hash = svc.scope_show(project).scope_hash
    svc.governance.record_trigger_hits([f"{CANARIES[0]} deploy"], scope_hash, svc.clock().date())
    return slugs


def svc_audit(home: Path) -> list[dict[str, object]]:
    lines = (home / "audit" / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture
def keyed_svc(settings: Settings, file_keyring: object) -> Iterator[MemoryService]:
    service = open_service(settings)
    try:
        yield service
    finally:
        service.close()


def test_mark_seals_every_memory_and_leaves_no_plaintext_in_any_store(
    keyed_svc: MemoryService, project: Path, home: Path
) -> None:
    svc = keyed_svc
    slugs = plant(svc, project)
    other = svc.record(
        MemoryDraft.model_validate(
            {"type": "fact", "title": "Plain fact", "body": "plain body", "scope_path": home.parent}
        )
    )
    scope_hash = svc.scope_show(project).scope_hash
    Inbox(home).submit(
        IndexRequest(
            slug=slugs[0], path="gone.md", scope_hash=scope_hash, scope_path=None,
            source="manual", ts=now_ts(),
        )
    )  # fmt: skip
    report = svc.sensitive_mark(project / "src")  # a subdirectory names its scope too

    assert report.scope_hash == scope_hash
    assert report.encrypted == 3
    assert report.scrubbed >= 2  # the promotion and the trigger counts
    assert (project / SENSITIVE_MARKER).is_file()
    assert svc.scope_show(project).sensitive
    assert plain_files(home, scope_hash) == []
    sealed = encrypted_files(home, scope_hash)
    assert len(sealed) == 3
    for path in sealed:
        assert envelope.read_header(path.read_bytes(), path).version == 1
    new_slugs = sorted(p.name.removesuffix(".md.enc") for p in sealed)
    assert all("-s-" in slug for slug in new_slugs)
    assert set(new_slugs).isdisjoint(slugs)
    # The graph keeps a skeleton; the index nothing; the other scope is untouched.
    row = svc.graph.get_memory(new_slugs[0])
    assert row is not None
    assert (row.title, row.body, row.tags, row.triggers, row.sensitive) == ("", "", [], [], True)
    assert row.type.value == "decision"
    assert svc.search(CANARIES[0]) == []
    assert [h.slug for h in svc.search("plain")] == [other.slug]
    assert Inbox(home).requested_slugs() == set()
    assert svc.governance.promotions() == []
    # The plaintext still reads back under the key, in memory.
    memory = svc.vault.read(sealed[0])
    assert memory.sensitive
    assert memory.meta.title.startswith("Deploy notes ")
    assert "quuxhost-4417.internal" in memory.body
    svc.close()
    # The audit log predates the mark (its old lines name the old slugs): everything else
    # under the data dir is scanned, the graph's files and WAL and governance.db included.
    assert leaks(home, skip=("audit",)) == []
    mark_lines = [r for r in svc_audit(home) if r["event_type"] == "sensitive_mark"]
    assert mark_lines
    assert all(c.lower() not in json.dumps(mark_lines).lower() for c in CANARIES)


def test_mark_again_resumes_and_changes_nothing_twice(
    keyed_svc: MemoryService, project: Path, home: Path
) -> None:
    svc = keyed_svc
    plant(svc, project)
    first = svc.sensitive_mark(project)
    names = sorted(p.name for p in encrypted_files(home, first.scope_hash))
    second = svc.sensitive_mark(project)
    assert second.encrypted == 0
    assert second.key_id == first.key_id
    assert sorted(p.name for p in encrypted_files(home, first.scope_hash)) == names


def test_writes_in_a_marked_scope_are_sealed_with_opaque_slugs(
    keyed_svc: MemoryService, project: Path, home: Path
) -> None:
    svc = keyed_svc
    svc.sensitive_mark(project)
    memory = svc.record(draft(project, f"Use {CANARIES[0]}", f"on {CANARIES[1]}"))
    assert memory.sensitive
    assert memory.path is not None
    assert memory.path.name.endswith(".md.enc")
    assert "-s-" in memory.slug
    assert CANARIES[0].lower() not in memory.slug.lower()
    with pytest.raises(PolicyDenied, match="needs a grant"):
        svc.get(memory.slug)
    row = svc.graph.get_memory(memory.slug)
    assert row is not None
    assert row.title == ""
    assert row.body == ""
    assert svc.search(CANARIES[0]) == []
    svc.grant(project, "once")
    assert svc.get(memory.slug).meta.title == f"Use {CANARIES[0]}"
    updated = svc.update_keywords(memory.slug, tags=["ops"])
    assert updated.meta.tags == ["ops"]
    assert updated.path == memory.path
    svc.close()
    assert leaks(home) == []


def test_mark_without_a_keyring_fails_clearly_and_passphrase_mode_works(
    settings: Settings, project: Path, home: Path, no_keyring: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with open_service(settings) as svc:
        memory = svc.record(draft(project, "Before", "plain before the mark"))
        with pytest.raises(KeyringUnavailable) as caught:
            svc.sensitive_mark(project)
        assert "--passphrase" in caught.value.hint
        assert memory.path is not None
        assert memory.path.is_file()
        assert not (project / SENSITIVE_MARKER).exists()
        report = svc.sensitive_mark(project, passphrase="pass phrase one")
        assert report.key_mode == "passphrase"
        assert report.encrypted == 1
    # A new process has the salt but not the passphrase: a clear error, data untouched.
    with open_service(settings) as svc:
        status = svc.sensitive_status()
        assert [s.key_available for s in status] == [False]
        assert PASSPHRASE_ENV in (status[0].key_problem or "")
        with pytest.raises(MissingKey, match=r"import-key|passphrase"):
            svc.record(draft(project, "After", "needs the key"))
    monkeypatch.setenv(PASSPHRASE_ENV, "pass phrase one")
    with open_service(settings) as svc:
        written = svc.record(draft(project, "After", "with the key"))
        svc.grant(project, "once")
        assert svc.get(written.slug).body == "with the key"


def test_rotate_key_reseals_every_file_and_forgets_the_old_key(
    keyed_svc: MemoryService, project: Path, home: Path, file_keyring: object
) -> None:
    svc = keyed_svc
    plant(svc, project)
    marked = svc.sensitive_mark(project)
    rotated = svc.sensitive_rotate_key(project)
    assert rotated.old_keys == [marked.key_id]
    assert rotated.key_id != marked.key_id
    assert rotated.resealed == 3
    for path in encrypted_files(home, marked.scope_hash):
        assert envelope.read_header(path.read_bytes(), path).key_id.hex() == rotated.key_id
        assert svc.vault.read(path).sensitive
    ring = file_keyring.get_password  # type: ignore[attr-defined]
    assert ring("memoryd-sensitive", f"{marked.scope_hash}:{marked.key_id}") is None
    assert KeyStore(home).current(marked.scope_hash).key_id.hex() == rotated.key_id
    with pytest.raises(NotFound, match="not marked sensitive"):
        svc.sensitive_rotate_key(home.parent)


def test_export_wipe_import_through_the_cli(
    settings: Settings, project: Path, home: Path, file_keyring: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with open_service(settings) as svc:
        svc.record(draft(project, "Secret plan", "the plan"))
    result = runner.invoke(app, ["sensitive", "mark", str(project), "--home", str(home)])
    assert result.exit_code == 0, result.output
    assert "1 memories encrypted" in result.output
    monkeypatch.setenv(PASSPHRASE_ENV, "backup words")
    backup = home.parent / "scope.key"
    result = runner.invoke(
        app, ["sensitive", "export-key", str(project), str(backup), "--home", str(home)]
    )
    assert result.exit_code == 0, result.output
    scope_hash = json.loads(backup.read_text())["scope_hash"]
    key_id = json.loads(backup.read_text())["current"]
    file_keyring.delete_password("memoryd-sensitive", f"{scope_hash}:{key_id}")  # type: ignore[attr-defined]
    result = runner.invoke(app, ["sensitive", "status", "--json", "--home", str(home)])
    assert result.exit_code == 0, result.output
    [status] = json.loads(result.output)
    assert status["key_available"] is False
    assert "memoryd sensitive import-key" in status["key_problem"]
    result = runner.invoke(
        app, ["sensitive", "import-key", str(project), str(backup), "--home", str(home)]
    )
    assert result.exit_code == 0, result.output
    assert key_id in result.output
    with open_service(settings) as svc:
        [path] = encrypted_files(home, scope_hash)
        assert svc.vault.read(path).body == "the plan"


def test_mark_rotate_and_grant_refuse_a_plaintext_keyring_through_the_cli(
    settings: Settings, project: Path, home: Path, file_keyring: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The dev extras' PlaintextKeyring without the tests' allowance: no key goes to (or is
    read from) a plaintext file; the error names the backend and the fix."""
    keyring_file = Path(file_keyring.file_path)  # type: ignore[attr-defined]
    monkeypatch.delenv(TEST_KEYRING_ENV)
    with open_service(settings) as svc:
        svc.record(draft(project, "Secret plan", "the plan"))
    result = runner.invoke(app, ["sensitive", "mark", str(project), "--home", str(home)])
    assert result.exit_code != 0
    assert "keyrings.alt.file.PlaintextKeyring" in result.output
    assert "--passphrase" in result.output
    assert not keyring_file.exists()
    assert not (project / SENSITIVE_MARKER).exists()
    # Marked while the tests' allowance holds, then the allowance gone: rotating and
    # granting refuse to touch the plaintext keyring.
    monkeypatch.setenv(TEST_KEYRING_ENV, "keyrings.alt.file.PlaintextKeyring")
    result = runner.invoke(app, ["sensitive", "mark", str(project), "--home", str(home)])
    assert result.exit_code == 0, result.output
    monkeypatch.delenv(TEST_KEYRING_ENV)
    result = runner.invoke(app, ["sensitive", "rotate-key", str(project), "--home", str(home)])
    assert result.exit_code != 0
    assert "PlaintextKeyring" in result.output
    with open_service(settings) as svc:
        [status] = svc.sensitive_status()
        assert status.key_available is False
        assert "PlaintextKeyring" in (status.key_problem or "")
        with pytest.raises(MissingKey, match="Plaintext"):
            svc.record(draft(project, "After", "needs the key"))


def test_unmark_needs_yes_and_a_grant_then_decrypts_back(
    keyed_svc: MemoryService, project: Path, home: Path, file_keyring: object
) -> None:
    svc = keyed_svc
    plant(svc, project)
    marked = svc.sensitive_mark(project)
    with pytest.raises(InvalidInput, match="plaintext"):
        svc.sensitive_unmark(project)
    with pytest.raises(PolicyDenied, match="needs a grant") as denied:
        svc.sensitive_unmark(project, yes=True)
    assert f"memoryd grant {project}" in denied.value.hint
    assert len(encrypted_files(home, marked.scope_hash)) == 3  # nothing touched
    svc.grant(project, "once")
    report = svc.sensitive_unmark(project, yes=True)
    assert report.decrypted == 3
    assert encrypted_files(home, marked.scope_hash) == []
    assert len(plain_files(home, marked.scope_hash)) == 3
    assert not (project / SENSITIVE_MARKER).exists()
    assert not svc.scope_show(project).sensitive
    assert svc.sensitive_status() == []
    ring = file_keyring.get_password  # type: ignore[attr-defined]
    assert ring("memoryd-sensitive", f"{marked.scope_hash}:{marked.key_id}") is None
    [hit, *_] = svc.search("quuxhost")  # back in the on-disk index, readable without grant
    assert svc.get(hit.slug).body.startswith("We deploy")


def test_doctor_checks_every_encrypted_header_without_the_key(
    keyed_svc: MemoryService, project: Path, home: Path
) -> None:
    import keyring
    from keyring.backends.fail import Keyring as FailKeyring

    plant(keyed_svc, project)
    marked = keyed_svc.sensitive_mark(project)
    keyed_svc.close()
    keyring.set_keyring(FailKeyring())  # the file_keyring fixture puts its own back
    result = runner.invoke(app, ["doctor", "--json", "--home", str(home)])
    checks = {c["name"]: c for c in json.loads(result.output)}
    assert checks["encrypted files"]["ok"], checks["encrypted files"]
    assert checks["encrypted files"]["detail"].startswith("3 encrypted files")
    assert checks["index consistency"]["ok"], checks["index consistency"]
    first, second, *_ = encrypted_files(home, marked.scope_hash)
    first.write_bytes(b"MDENC\x07" + first.read_bytes()[6:])
    second.write_bytes(second.read_bytes()[:20])
    result = runner.invoke(app, ["doctor", "--json", "--home", str(home)])
    assert result.exit_code == 1
    failed = {c["name"]: c for c in json.loads(result.output) if not c["ok"]}
    detail = failed["encrypted files"]["detail"]
    assert f"{first}: encrypted file format version 7" in detail
    assert f"{second}: encrypted file is truncated" in detail


def test_sensitive_extraction_stays_in_memory_and_skips_the_llm_unless_allowed(
    keyed_svc: MemoryService, project: Path
) -> None:
    from tests.integration.test_llm import FakeProvider

    svc = keyed_svc
    svc.sensitive_mark(project)
    fake = FakeProvider(answer={"entities": [], "relations": []})
    svc.llm = fake
    memory = svc.record(draft(project, "Database", "We moved the ledger to PostgreSQL."))
    assert fake.calls == []
    svc.grant(project, "once")
    assert "entity:tool:PostgreSQL" in svc.get(memory.slug).meta.observations  # sealed file
    assert svc.graph.entity_catalogue() == []  # the on-disk graph: a skeleton, no entity
    svc.llm_allow_sensitive = True
    svc.record(draft(project, "Cache", "We put Redis in front of the ledger."))
    assert len(fake.calls) == 1


def test_a_recalled_scope_marked_sensitive_leaves_no_saved_statistics(
    keyed_svc: MemoryService, settings: Settings, project: Path, home: Path
) -> None:
    """A recall saves the scope's statistics beside the index (its memories' text and
    tokens); marking the scope, in a process that never recalled it, takes its memories out
    of the index, and those go too."""
    plant(keyed_svc, project)
    assert keyed_svc.recall(f"deploy {CANARIES[0]}", scope=project, track=False)
    keyed_svc.close()
    stats = home / "search" / "stats"
    saved = [*stats.glob("*.stats"), *stats.glob("*.delta")]  # files and their frames
    assert any(CANARIES[0].lower().encode() in path.read_bytes() for path in saved)
    marking = open_service(settings)
    try:
        marking.sensitive_mark(project)
    finally:
        marking.close()
    assert leaks(home / "search") == []
