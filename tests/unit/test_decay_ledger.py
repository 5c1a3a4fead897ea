"""The vault's decay ledger (`scopes/<hash>/decay.jsonl`) and how `Vault.read` applies it
and the `forgotten/` folder to a memory file that a sweep did not rewrite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from memoryd.models import DecayState, Frontmatter, Memory, MemoryType, format_ts
from memoryd.vault import FORGOTTEN_DIR, Vault, decay_line

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCOPE = "0123456789ab"
A, D, S, F = (DecayState.ALIVE, DecayState.DIM, DecayState.SOFT_FORGOTTEN, DecayState.FORGOTTEN)


def written(vault: Vault, slug: str, *, recalled: datetime | None = None) -> Path:
    meta = Frontmatter(
        title=f"Session {slug}",
        slug=slug,
        type=MemoryType.SESSION,
        scope_hash=SCOPE,
        source="manual",
        created_at=T0,
        updated_at=T0,
        last_recalled_at=recalled,
    )
    return vault.write(Memory(meta=meta, body="Notes on the nginx reload."))


def test_a_line_holds_while_its_basis_is_the_files_last_recall(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    path = written(vault, "s1", recalled=T0)
    vault.append_decay(SCOPE, [decay_line("s1", A, D, T0 + timedelta(days=95), T0)])
    assert vault.read(path).meta.decay_state is D
    # A recall rewrites the file with a new last_recalled_at: the line no longer holds.
    written(vault, "s1", recalled=T0 + timedelta(days=96))
    assert vault.read(path).meta.decay_state is A


def test_a_forget_reads_from_the_folder_and_falls_back_when_the_rename_never_came(
    tmp_path: Path,
) -> None:
    vault = Vault(tmp_path)
    path = written(vault, "s2")
    at = T0 + timedelta(days=300)
    vault.append_decay(SCOPE, [decay_line("s2", S, F, at, None)])
    assert vault.read(path).meta.decay_state is S  # not renamed (a crash): its `from`
    assert vault.read(path).meta.forgotten_at is None
    target = path.parent.parent / FORGOTTEN_DIR / path.name
    target.parent.mkdir()
    path.rename(target)
    memory = vault.read(target)
    assert memory.meta.decay_state is F
    assert memory.meta.forgotten_at == at
    # The folder is authoritative: with its ledger line lost, it still reads as forgotten.
    vault.decay_ledger_path(SCOPE).unlink()
    assert vault.read(target).meta.decay_state is F
    assert vault.read(target).meta.forgotten_at == T0  # its updated_at stands in


def test_compaction_keeps_each_memorys_last_move_and_a_torn_tail_is_skipped(
    tmp_path: Path,
) -> None:
    vault = Vault(tmp_path)
    path = written(vault, "s3")
    moves = [decay_line(f"m{n % 3}", A, D, T0 + timedelta(days=n), None) for n in range(1500)]
    vault.append_decay(SCOPE, moves)
    vault.append_decay(SCOPE, [decay_line("s3", A, D, T0, None)])
    assert not vault.compact_decay(SCOPE, appended=10**9)  # all just appended: not read
    assert vault.compact_decay(SCOPE)
    lines = vault.decay_ledger_path(SCOPE).read_text().splitlines()
    assert sorted(json.loads(line)["slug"] for line in lines) == ["m0", "m1", "m2", "s3"]
    assert vault.decay_ledger(SCOPE)["m2"].at == format_ts(T0 + timedelta(days=1499))
    with vault.decay_ledger_path(SCOPE).open("a") as ledger:
        ledger.write('{"slug":"s3","from":"dim","to":"soft-for')  # a crash mid-append
    assert vault.read(path).meta.decay_state is D
    vault.append_decay(SCOPE, [decay_line("s3", D, S, T0 + timedelta(days=30), None)])
    assert vault.read(path).meta.decay_state is S  # the next append starts a line of its own


@pytest.mark.parametrize(
    "slug", ["session-2026-01-01-ab12cd", 'quote"d', "back\\slash", "tab\there", "中文-é", "\x7f"]
)
def test_a_ledger_line_is_the_json_of_its_move(slug: str) -> None:
    """Written by hand for speed, a line still says exactly what `json.dumps` would."""
    at = datetime(2026, 3, 1, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    for basis in (None, T0):
        line = decay_line(slug, A, S, at, basis)
        assert line.endswith("\n")
        assert json.loads(line) == {
            "slug": slug,
            "from": "alive",
            "to": "soft-forgotten",
            "at": "2026-03-01T02:05:06Z",
            "basis": None if basis is None else format_ts(basis),
        }
