"""The view snapshot of a sensitive scope (`scopes/<hash>/view.enc`): a grant reads one sealed
file instead of decrypting and parsing every memory, and is never wrong because of it.

Real stores, a real keyring backend (keyrings.alt's file backend), the embedded service. The
service logs how many memory files a view read ("N of M memory files decrypted"): that is how
these tests see whether a view came from the snapshot or from the files.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from memoryd.config import Settings
from memoryd.models import MemoryDraft, MemoryType, Predicate, RelationRef
from memoryd.recall import conversation
from memoryd.recall.granted import (
    SNAPSHOT_FORMAT,
    Held,
    ScopeView,
    decode_snapshot,
    encode_snapshot,
)
from memoryd.search.index import SearchIndex
from memoryd.sensitive.files import encrypted_files
from memoryd.sensitive.snapshot import SNAPSHOT_FILE, open_snapshot, scan, seal_snapshot
from memoryd.service import MemoryService
from memoryd.vault import parse, render
from memoryd.wiring import open_service

SECRET = "Zorblatt"
N = 12


def decrypted(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The view builds' "N of M memory files decrypted" lines logged so far (then cleared)."""
    lines = [r.getMessage() for r in caplog.records if "memory files decrypted" in r.getMessage()]
    caplog.clear()
    return lines


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture
def marked(
    settings: Settings, file_keyring: object, project: Path, caplog: pytest.LogCaptureFixture
) -> Iterator[tuple[MemoryService, str]]:
    """`N` memories recorded in `project`, then the project marked sensitive."""
    caplog.set_level(logging.INFO, logger="memoryd")
    svc = open_service(settings)
    try:
        svc.record_many(
            [
                MemoryDraft(
                    type=[MemoryType.DECISION, MemoryType.FACT, MemoryType.SESSION][i % 3],
                    title=f"{SECRET} ledger {i}",
                    body=f"Entry {i}: {SECRET} bought a replica for tenant {i} and ran the audit.",
                    scope_path=project,
                    tags=["ledger"],
                    triggers=[f"tenant {i}"],
                )
                for i in range(N)
            ]
        )
        svc.sensitive_mark(project)
        yield svc, svc.scope_show(project).scope_hash
    finally:
        svc.close()


def snapshot_file(home: Path, scope_hash: str) -> Path:
    return home / "scopes" / scope_hash / SNAPSHOT_FILE


def view_state(svc: MemoryService, project: Path) -> tuple[object, ...]:
    """What a grant shows of the scope: search hits with scores, recall, the statistics."""
    scope_hash = svc.scope_show(project).scope_hash
    view = svc.granted_view(scope_hash)
    assert view is not None
    hits = [(h.slug, round(h.score, 6)) for h in svc.search(f"{SECRET} replica", scope=project)]
    # Untracked: a counted recall changes what the next one ranks (recency of use).
    recalled = [
        h.slug for h in svc.recall(f"{SECRET} audit tenant", scope=project, track=False).hits
    ]
    stats = view.index.statistics([scope_hash], include_forgotten=True)
    titles = {slug: m.meta.title for slug, m in view.memories.items()}
    return hits, recalled, stats.docs, sorted(stats.df.items()), titles


def test_mark_seals_a_snapshot_and_a_grant_reads_it_instead_of_the_files(
    marked: tuple[MemoryService, str], project: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    svc, scope_hash = marked
    path = snapshot_file(home, scope_hash)
    blob = path.read_bytes()
    assert blob.startswith(b"MDENC")  # the memory files' sealed format
    assert SECRET.encode() not in blob
    assert b"ledger" not in blob
    caplog.clear()

    svc.grant(project, "session")
    from_snapshot = view_state(svc, project)
    assert decrypted(caplog) == []  # no memory file was opened
    assert len(from_snapshot[4]) == N  # type: ignore[arg-type]
    got = svc.get(next(iter(from_snapshot[4])))  # type: ignore[call-overload]
    assert got.sensitive
    assert SECRET in got.body

    # The same view built from the files alone ranks and counts exactly the same.
    svc.revoke(project)
    path.unlink()
    svc.grant(project, "session")
    assert view_state(svc, project) == from_snapshot
    assert decrypted(caplog) == [f"scope {scope_hash}: {N} of {N} memory files decrypted"]
    svc.revoke(project)  # the view goes, and is saved as the snapshot again
    assert path.is_file()
    svc.grant(project, "session")
    assert view_state(svc, project) == from_snapshot
    assert decrypted(caplog) == []


def test_edits_additions_and_removals_show_under_a_grant_and_between_grants(
    marked: tuple[MemoryService, str], project: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    svc, scope_hash = marked
    svc.grant(project, "session")
    held_view = svc.granted_view(scope_hash)
    assert held_view is not None
    slugs = sorted(held_view.memories)
    caplog.clear()

    # Under the grant: each write reaches the view, and only the written file is read.
    svc.update_keywords(slugs[0], tags=["quokka"])
    assert [h.slug for h in svc.search("quokka", scope=project)] == [slugs[0]]
    assert decrypted(caplog) == [f"scope {scope_hash}: 1 of {N} memory files decrypted"]
    added = svc.record(
        MemoryDraft(
            type=MemoryType.DECISION,
            title=f"{SECRET} wombat",
            body="The wombat ledger moved.",
            scope_path=project,
        )
    )
    assert [h.slug for h in svc.search("wombat", scope=project)] == [added.slug]
    svc.archive(slugs[1])
    assert slugs[1] not in {h.slug for h in svc.search(f"{SECRET} ledger", scope=project, k=50)}
    # The held view took each write in place, and counts as a view built afresh does.
    view = svc.granted_view(scope_hash)
    assert view is not None
    assert view is held_view
    fresh = ScopeView(scope_hash, view.held.values(), stamp=None)
    for hidden in (False, True):
        assert view.index.statistics(
            [scope_hash], include_forgotten=hidden, is_turn=conversation.is_turn
        ) == fresh.index.statistics(
            [scope_hash], include_forgotten=hidden, is_turn=conversation.is_turn
        )
    assert view.index.slugs() == fresh.index.slugs()
    assert view.graph.entity_catalogue() == fresh.graph.entity_catalogue()
    fresh.close()
    svc.revoke(project)

    # Between grants: a file edited by another writer, one removed, and one brought back
    # from a backup (an older sealed version) all show as the files say.
    folder = home / "scopes" / scope_hash
    before = {p.name: p.read_bytes() for p in encrypted_files(home, scope_hash)}
    svc.grant(project, "session")
    svc.update_keywords(slugs[2], tags=["platypus"])
    svc.revoke(project)
    assert snapshot_file(home, scope_hash).is_file()
    gone = next(p for p in encrypted_files(home, scope_hash) if slugs[3] in p.name)
    gone.unlink()
    restored = next(p for p in encrypted_files(home, scope_hash) if slugs[2] in p.name)
    restored.write_bytes(before[restored.name])  # the version without "platypus"
    caplog.clear()

    svc.grant(project, "session")
    view = svc.granted_view(scope_hash)
    assert view is not None
    assert slugs[3] not in view.memories
    assert list(svc.search("platypus", scope=project)) == []
    assert view.memories[slugs[2]].meta.tags == ["ledger"]
    assert view.memories[slugs[0]].meta.tags == ["quokka"]
    assert added.slug in view.memories
    held = scan(home, scope_hash)
    assert len(view.memories) == len(held)
    assert decrypted(caplog) == [f"scope {scope_hash}: 1 of {len(held)} memory files decrypted"]
    assert (folder / "forgotten").is_dir()


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "another scope's", "garbage"])
def test_a_damaged_or_foreign_snapshot_is_rebuilt_with_a_warning(
    marked: tuple[MemoryService, str],
    project: Path,
    home: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:
    svc, scope_hash = marked
    path = snapshot_file(home, scope_hash)
    svc.grant(project, "session")
    expected = view_state(svc, project)
    svc.revoke(project)
    blob = bytearray(path.read_bytes())
    if damage == "flipped byte":
        blob[len(blob) // 2] ^= 0x01
    elif damage == "truncated":
        blob = blob[: len(blob) // 3]
    elif damage == "garbage":
        blob = bytearray(b"not a snapshot at all")
    else:  # a valid snapshot of another sensitive scope, copied over this one's
        other = tmp_path / "elsewhere"
        other.mkdir()
        svc.record(MemoryDraft(type=MemoryType.FACT, title="Other", body="other", scope_path=other))
        svc.sensitive_mark(other)
        blob = bytearray(snapshot_file(home, svc.scope_show(other).scope_hash).read_bytes())
    path.write_bytes(bytes(blob))
    caplog.clear()

    svc.grant(project, "session")
    assert view_state(svc, project) == expected
    assert any("rebuilding the view snapshot" in w for w in warnings(caplog))
    assert decrypted(caplog) == [f"scope {scope_hash}: {N} of {N} memory files decrypted"]
    svc.revoke(project)
    assert open_snapshot(home, scope_hash, svc.keys) is not None  # written afresh


def test_rotation_carries_the_snapshot_to_the_new_key_and_unmark_removes_it(
    marked: tuple[MemoryService, str], project: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    svc, scope_hash = marked
    svc.grant(project, "session")
    expected = view_state(svc, project)
    svc.revoke(project)
    report = svc.sensitive_rotate_key(project)
    blob = snapshot_file(home, scope_hash).read_bytes()
    assert blob[6:14].hex() == report.key_id  # sealed with the new key
    caplog.clear()
    svc.grant(project, "session")
    assert view_state(svc, project) == expected
    assert decrypted(caplog) == []
    svc.sensitive_unmark(project, yes=True)
    assert not snapshot_file(home, scope_hash).exists()
    assert warnings(caplog) == []


def test_a_held_memory_round_trips_through_the_snapshot_payload(tmp_path: Path) -> None:
    """Everything a view holds of a memory comes back from the payload as it went in: the
    memory as its file parses (extra keys, relations, a body without a final newline), its
    document, its facts and its tokens."""
    folder = tmp_path / "scope"
    text = (
        "---\n"
        "title: Ledger \u2014 rotation\n"
        "slug: 2026-01-02-s-abcdef012345\n"
        "type: decision\n"
        "scope_hash: abcdef012345\n"
        "source: manual\n"
        "created_at: 2026-01-02T03:04:05Z\n"
        "tags: [ledger, audit]\n"
        "observations: ['entity:tool:Terraform']\n"
        "reviewed_on: 2026-02-03\n"
        "relations:\n"
        "  - predicate: uses\n"
        "    subject: entity:project:billing\n"
        "    object: entity:tool:Terraform\n"
        "    confidence: 0.8\n"
        "---\n\n"
        "Children bought\n\nthe ledger."
    )
    memory = parse(text, folder / "decisions" / "2026-01-02-s-abcdef012345.md.enc")
    plain = parse(render(memory), folder / "sessions" / "x.md.enc")
    plain.meta.slug = "2026-01-03-s-bbbbbbbbbbbb"
    plain.meta.relations = [RelationRef(predicate=Predicate.MENTIONS, object="entity:tool:Make")]
    index = SearchIndex.in_memory("abcdef012345")
    try:
        held = [
            Held.of(memory, file="decisions/a.md.enc", folder=folder, stamp=(1, 2, 3, 4),
                    text=text),
            Held.of(plain, file="sessions/x.md.enc", folder=folder, stamp=(5, 6, 7, 8),
                    text=render(plain)),
        ]  # fmt: skip
        back = decode_snapshot(encode_snapshot("abcdef012345", held, index), "abcdef012345", folder)
        assert list(back) == ["decisions/a.md.enc", "sessions/x.md.enc"]
        for before in held:
            after = back[before.file]
            assert after.stamp == before.stamp
            assert after.text == before.text
            assert after.doc == before.doc
            assert after.facts == before.facts
            assert after.tokens == index.tokens(before.doc.title, before.doc.body)
            assert after.memory().model_dump() == {
                **before.memory().model_dump(),
                "path": folder / before.file,
            }
        assert back["decisions/a.md.enc"].memory().meta.model_extra == {
            "reviewed_on": memory.meta.model_extra["reviewed_on"]  # type: ignore[index]
        }
        view = ScopeView("abcdef012345", back.values(), stamp=None)
        assert view.graph.related_entities(["entity:project:billing"]) == [
            ("entity:project:billing", "entity:tool:Terraform", "uses", 0.8)
        ]
        assert view.graph.mentioning(["entity:tool:Make"]) == [
            ("entity:tool:Make", plain.slug, 1.0)
        ]
        view.close()
    finally:
        index.close()


def test_a_view_needs_no_snapshot_to_be_right_when_the_folder_is_copied_elsewhere(
    marked: tuple[MemoryService, str], project: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A data dir restored from a backup (every file new: other inodes) reads every file again
    rather than trusting the snapshot it brought along."""
    svc, scope_hash = marked
    svc.grant(project, "session")
    expected = view_state(svc, project)
    svc.revoke(project)
    folder = home / "scopes" / scope_hash
    copy = folder.with_name("copy")
    shutil.copytree(folder, copy)
    shutil.rmtree(folder)
    copy.rename(folder)
    caplog.clear()
    svc.grant(project, "session")
    assert view_state(svc, project) == expected
    assert decrypted(caplog) == [f"scope {scope_hash}: {N} of {N} memory files decrypted"]


def test_a_snapshot_of_another_format_is_rebuilt_without_a_warning(
    marked: tuple[MemoryService, str], project: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade that changes what a snapshot holds: expected, so rebuilt quietly."""
    svc, scope_hash = marked
    svc.grant(project, "session")
    expected = view_state(svc, project)
    svc.revoke(project)
    payload = orjson.loads(open_snapshot(home, scope_hash, svc.keys) or b"{}")
    payload["format"] = SNAPSHOT_FORMAT + 1
    seal_snapshot(home, scope_hash, svc.keys.current(scope_hash), orjson.dumps(payload))
    caplog.clear()
    svc.grant(project, "session")
    assert view_state(svc, project) == expected
    assert warnings(caplog) == []
    assert any("rebuilding the view snapshot" in r.getMessage() for r in caplog.records)
    assert decrypted(caplog) == [f"scope {scope_hash}: {N} of {N} memory files decrypted"]
