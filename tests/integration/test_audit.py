"""The audit log against real files: chain, tamper detection, torn tails, threads, filters."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.audit import (
    GENESIS_HASH,
    HEAD_NAME,
    LOG_NAME,
    AuditEvent,
    AuditLog,
    canonical_json,
    check_chain,
)
from memoryd.audit.records import _GENESIS
from memoryd.errors import AuditChainBroken, InvalidInput, ResourceExhausted, StorageError
from memoryd.models import AuditRecord

CHAIN_LENGTH = 30


class FakeClock:
    """A clock the tests move by hand, so `since` filters are exact."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


def _event(i: int) -> AuditEvent:
    """Varied events: Chinese, quotes, escapes and missing fields all go through the chain."""
    return AuditEvent(
        actor=("cli", "daemon", "hook:claude-code")[i % 3],
        event_type=("capture", "record", "promote", "decay")[i % 4],
        scope_hash=None if i % 5 == 0 else f"{i:012x}",
        target_id=None if i % 7 == 0 else f'2026-05-18-会话-{i}-"q"\\',
        details={"n": i, "note": "切换到 Solid\n\t\u2028", "tags": ["a", "b"], "ok": i % 2 == 0},
    )


def _build_chain(directory: Path, n: int = CHAIN_LENGTH) -> AuditLog:
    log = AuditLog(directory, clock=FakeClock(datetime(2026, 5, 18, 22, 30, tzinfo=UTC)))
    log.append_many([_event(i) for i in range(n // 2)])
    for i in range(n // 2, n):
        log.append(
            actor=_event(i).actor,
            event_type=_event(i).event_type,
            scope_hash=_event(i).scope_hash,
            target_id=_event(i).target_id,
            details=_event(i).details,
        )
    return log


def _lines(directory: Path) -> list[bytes]:
    return (directory / LOG_NAME).read_bytes().splitlines(keepends=True)


def _write_lines(directory: Path, lines: list[bytes]) -> None:
    (directory / LOG_NAME).write_bytes(b"".join(lines))


def _head(directory: Path) -> dict[str, object]:
    head: dict[str, object] = json.loads((directory / HEAD_NAME).read_text())
    return head


# -- the chain itself -------------------------------------------------------------------------


def test_chain_of_30_verifies_and_hashes_as_specified(tmp_path: Path) -> None:
    log = _build_chain(tmp_path)

    result = log.verify()

    assert result.ok, result.problem
    assert result.lines == CHAIN_LENGTH
    assert result.first_bad_line is None
    prev = GENESIS_HASH
    for seq, raw in enumerate(_lines(tmp_path), start=1):
        record = json.loads(raw)
        assert list(record) == sorted(record), "lines are written with sorted keys"
        assert raw == canonical_json(record).encode() + b"\n"
        assert record["seq"] == seq
        assert record["ts"].endswith("Z")
        assert record["prev_hash"] == prev
        body = {k: v for k, v in record.items() if k not in ("prev_hash", "this_hash")}
        expected = hashlib.sha256((prev + canonical_json(body)).encode("utf-8")).hexdigest()
        assert record["this_hash"] == "sha256:" + expected
        prev = record["this_hash"]
    assert _head(tmp_path) == {"seq": CHAIN_LENGTH, "this_hash": prev}


def test_append_returns_the_records_it_wrote(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit")
    first = log.append(
        actor="cli", event_type="record", scope_hash="d8e86b48589e", target_id="slug-1"
    )
    batch = log.append_many(
        [AuditEvent(actor="daemon", event_type="decay", details={"moved": 3})] * 3
    )

    assert (tmp_path / "audit").is_dir()
    assert first.seq == 1
    assert first.prev_hash == GENESIS_HASH
    assert first.details == "{}"
    assert [r.seq for r in batch] == [2, 3, 4]
    assert batch[0].prev_hash == first.this_hash
    assert json.loads(batch[0].details) == {"moved": 3}
    assert log.read() == [first, *batch]
    assert log.append_many([]) == []


def test_tricky_text_is_encoded_exactly_like_canonical_json(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    strings = ['q"uo\\te', "line\nbreak\r\t", "\x00\x1f\x7f", "中文🙂", "\u2028\u2029", "é"]
    for text in strings:
        log.append(
            actor="a" + text,
            event_type="e" + text,
            scope_hash=text,
            target_id=text,
            details={text: text, "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)},
        )
    log.append(
        actor="cli",
        event_type="x",
        scope_hash=None,
        target_id=None,
        details={"path": Path("/a/b"), "nested": {"z": [1, 2.5, None], "a": True}},
    )

    for raw in _lines(tmp_path):
        assert raw == canonical_json(json.loads(raw)).encode() + b"\n"
    assert log.verify().ok
    last = log.read()[-1]
    assert json.loads(last.details) == {"nested": {"a": True, "z": [1, 2.5, None]}, "path": "/a/b"}


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (AuditEvent(actor="", event_type="x"), "actor"),
        (AuditEvent(actor="cli", event_type="  "), "event_type"),
        (AuditEvent(actor="cli", event_type="x", details={"o": object()}), "JSON"),
        (AuditEvent(actor="cli", event_type="x", details={"n": float("nan")}), "JSON"),
        (AuditEvent(actor="cli", event_type="x", target_id="\ud800"), "Unicode"),
        (AuditEvent(actor="cli", event_type="x", scope_hash=12), "scope_hash"),  # type: ignore[arg-type]
    ],
)
def test_bad_events_are_refused_before_anything_is_written(
    tmp_path: Path, event: AuditEvent, message: str
) -> None:
    log = _build_chain(tmp_path, n=4)
    before = (tmp_path / LOG_NAME).read_bytes()

    with pytest.raises(InvalidInput, match=message):
        log.append_many([AuditEvent(actor="cli", event_type="ok"), event])

    assert (tmp_path / LOG_NAME).read_bytes() == before
    assert log.append(actor="cli", event_type="ok", scope_hash=None, target_id=None).seq == 5
    assert log.verify().ok


def test_a_new_instance_continues_the_chain(tmp_path: Path) -> None:
    _build_chain(tmp_path, n=5)

    record = AuditLog(tmp_path).append(actor="cli", event_type="x", scope_hash=None, target_id=None)

    assert record.seq == 6
    assert AuditLog(tmp_path).verify().ok


def test_empty_log_verifies(tmp_path: Path) -> None:
    result = AuditLog(tmp_path).verify()

    assert result.ok
    assert result.lines == 0


# -- the tamper suite -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pristine")
    _build_chain(directory)
    assert AuditLog(directory).verify().ok
    return directory


def _copies(pristine: Path, tmp_path: Path) -> Iterator[tuple[int, Path, list[bytes]]]:
    """A fresh copy of the pristine log for every line number."""
    for k in range(1, CHAIN_LENGTH + 1):
        copy = tmp_path / f"copy-{k}"
        shutil.copytree(pristine, copy)
        yield k, copy, _lines(copy)


def _edit_field(field: str) -> Callable[[dict[str, object]], None]:
    replacements: dict[str, object] = {
        "details": '{"n":-1}',
        "actor": "mallory",
        "ts": "2020-01-01T00:00:00.000Z",
        "target_id": "forged-target",
    }

    def edit(record: dict[str, object]) -> None:
        record[field] = replacements[field]

    return edit


@pytest.mark.parametrize("field", ["details", "actor", "ts", "target_id"])
def test_editing_any_field_of_any_line_is_caught_at_that_line(
    pristine: Path, tmp_path: Path, field: str
) -> None:
    edit = _edit_field(field)
    for k, copy, lines in _copies(pristine, tmp_path):
        record = json.loads(lines[k - 1])
        edit(record)
        lines[k - 1] = canonical_json(record).encode() + b"\n"
        _write_lines(copy, lines)

        result = AuditLog(copy).verify()

        assert not result.ok, f"{field} edit on line {k} not caught"
        assert result.first_bad_line == k
        assert result.problem == f"line {k}: this_hash does not match its content (edited?)"


def test_deleting_any_line_is_caught(pristine: Path, tmp_path: Path) -> None:
    for k, copy, lines in _copies(pristine, tmp_path):
        del lines[k - 1]
        _write_lines(copy, lines)

        result = AuditLog(copy).verify()

        assert not result.ok, f"deleting line {k} not caught"
        if k < CHAIN_LENGTH:
            assert result.first_bad_line == k
            assert result.problem is not None
            assert "a line was deleted or lines were swapped" in result.problem
        else:
            assert result.first_bad_line == CHAIN_LENGTH
            assert result.problem == (
                f"truncated after line {CHAIN_LENGTH - 1}: head.json expects {CHAIN_LENGTH} "
                "lines (1 removed from the end)"
            )


def test_swapping_any_line_with_the_next_is_caught(pristine: Path, tmp_path: Path) -> None:
    for k, copy, lines in _copies(pristine, tmp_path):
        if k == CHAIN_LENGTH:
            continue
        lines[k - 1], lines[k] = lines[k], lines[k - 1]
        _write_lines(copy, lines)

        result = AuditLog(copy).verify()

        assert not result.ok, f"swapping line {k} not caught"
        assert result.first_bad_line == k
        if k == 1:
            assert result.problem == (
                "line 1: seq 2, but the log starts at seq 1 "
                "(a line was deleted or lines were swapped)"
            )
        else:
            assert result.problem == (
                f"line {k}: seq {k + 1} follows {k - 1} (a line was deleted or lines were swapped)"
            )


def test_duplicating_any_line_is_caught(pristine: Path, tmp_path: Path) -> None:
    for k, copy, lines in _copies(pristine, tmp_path):
        lines.insert(k, lines[k - 1])
        _write_lines(copy, lines)

        result = AuditLog(copy).verify()

        assert not result.ok, f"duplicating line {k} not caught"
        assert result.first_bad_line == k + 1
        assert result.problem == f"line {k + 1}: seq {k} repeats line {k}'s (a line was duplicated)"


def test_cutting_whole_lines_from_the_end_is_caught_by_the_head(
    pristine: Path, tmp_path: Path
) -> None:
    for k, copy, lines in _copies(pristine, tmp_path):
        _write_lines(copy, lines[: k - 1])

        result = AuditLog(copy).verify()

        assert not result.ok, f"truncating at line {k} not caught"
        assert result.lines == k - 1
        assert result.first_bad_line == k  # the first line that is gone
        assert result.problem == (
            f"truncated after line {k - 1}: head.json expects {CHAIN_LENGTH} "
            f"lines ({CHAIN_LENGTH - k + 1} removed from the end)"
        )


def test_cutting_mid_line_is_caught_at_that_line(pristine: Path, tmp_path: Path) -> None:
    for k, copy, lines in _copies(pristine, tmp_path):
        _write_lines(copy, [*lines[: k - 1], lines[k - 1][: len(lines[k - 1]) // 2]])

        result = AuditLog(copy).verify()

        assert not result.ok, f"cutting line {k} in half not caught"
        assert result.first_bad_line == k
        assert result.problem is not None
        assert result.problem.startswith(f"line {k}: torn last line")


def test_garbage_and_foreign_lines_are_reported(pristine: Path, tmp_path: Path) -> None:
    cases: list[tuple[bytes, str]] = [
        (b"not json at all\n", "line 4: not valid JSON"),
        (b"\xff\xfe\n", "line 4: not valid JSON"),
        (b"[1, 2]\n", "line 4: not an audit record (not a JSON object)"),
        (b'{"seq": 4}\n', "line 4: not an audit record (missing field 'ts')"),
    ]
    for i, (garbage, problem) in enumerate(cases):
        copy = tmp_path / f"copy-{i}"
        shutil.copytree(pristine, copy)
        lines = _lines(copy)
        lines[3] = garbage
        _write_lines(copy, lines)

        result = AuditLog(copy).verify()

        assert (result.ok, result.first_bad_line, result.problem) == (False, 4, problem)


def test_an_extra_field_or_relinked_line_is_reported(pristine: Path, tmp_path: Path) -> None:
    shutil.copytree(pristine, tmp_path / "extra")
    lines = _lines(tmp_path / "extra")
    record = json.loads(lines[2])
    record["note"] = "x"
    lines[2] = canonical_json(record).encode() + b"\n"
    _write_lines(tmp_path / "extra", lines)
    assert AuditLog(tmp_path / "extra").verify().problem == (
        "line 3: not an audit record (unexpected field 'note')"
    )

    shutil.copytree(pristine, tmp_path / "relinked")
    lines = _lines(tmp_path / "relinked")
    record = json.loads(lines[2])
    record["prev_hash"] = GENESIS_HASH
    lines[2] = canonical_json(record).encode() + b"\n"
    _write_lines(tmp_path / "relinked", lines)
    assert AuditLog(tmp_path / "relinked").verify().problem == (
        "line 3: prev_hash does not match line 2's this_hash"
    )


def test_a_rewritten_tail_with_recomputed_hashes_is_caught_by_the_head(tmp_path: Path) -> None:
    """An editor who re-hashes the last line keeps the chain valid; the head anchor still knows."""
    log = _build_chain(tmp_path, n=5)
    head_before = (tmp_path / HEAD_NAME).read_bytes()
    lines = _lines(tmp_path)
    _write_lines(tmp_path, lines[:-1])
    (tmp_path / HEAD_NAME).unlink()
    forged = AuditLog(tmp_path)
    forged.append(actor="mallory", event_type="record", scope_hash=None, target_id=None)
    (tmp_path / HEAD_NAME).write_bytes(head_before)

    result = log.verify()

    assert not result.ok
    assert result.first_bad_line == 5
    assert result.problem == (
        "line 5: seq 5 is not the record the head anchor holds (the end of the log was rewritten)"
    )
    with pytest.raises(AuditChainBroken, match="end of the log was rewritten"):
        AuditLog(tmp_path).append(actor="cli", event_type="x", scope_hash=None, target_id=None)


def test_a_line_removed_from_the_start_is_caught(pristine: Path, tmp_path: Path) -> None:
    shutil.copytree(pristine, tmp_path / "c")
    _write_lines(tmp_path / "c", _lines(tmp_path / "c")[1:])

    result = AuditLog(tmp_path / "c").verify()

    assert (result.first_bad_line, result.problem) == (
        1,
        "line 1: seq 2, but the log starts at seq 1 (a line was deleted or lines were swapped)",
    )


# -- the head anchor and crashes --------------------------------------------------------------


def test_a_crash_between_append_and_head_write_is_accepted(tmp_path: Path) -> None:
    log = _build_chain(tmp_path, n=6)
    stale_head = (tmp_path / HEAD_NAME).read_bytes()
    log.append(actor="cli", event_type="x", scope_hash=None, target_id=None)
    log.append(actor="cli", event_type="x", scope_hash=None, target_id=None)
    (tmp_path / HEAD_NAME).write_bytes(stale_head)  # as if the process died before the rename

    assert AuditLog(tmp_path).verify().ok

    record = AuditLog(tmp_path).append(actor="cli", event_type="y", scope_hash=None, target_id=None)

    assert record.seq == 9
    assert _head(tmp_path) == {"seq": 9, "this_hash": record.this_hash}
    assert AuditLog(tmp_path).verify().ok


def test_a_log_without_a_head_verifies(tmp_path: Path) -> None:
    _build_chain(tmp_path, n=3)
    (tmp_path / HEAD_NAME).unlink()

    assert AuditLog(tmp_path).verify().ok


def test_an_unreadable_head_is_reported_and_blocks_appends(tmp_path: Path) -> None:
    _build_chain(tmp_path, n=3)
    (tmp_path / HEAD_NAME).write_text("{not json")

    result = AuditLog(tmp_path).verify()

    assert not result.ok
    assert result.problem is not None
    assert "head anchor" in result.problem
    assert "unreadable" in result.problem
    with pytest.raises(AuditChainBroken, match="unreadable"):
        AuditLog(tmp_path).append(actor="cli", event_type="x", scope_hash=None, target_id=None)


def test_appending_over_a_truncated_log_is_refused(tmp_path: Path) -> None:
    _build_chain(tmp_path, n=6)
    _write_lines(tmp_path, _lines(tmp_path)[:4])
    before = (tmp_path / LOG_NAME).read_bytes()

    with pytest.raises(AuditChainBroken, match="ends at seq 4 but the head anchor says 6"):
        AuditLog(tmp_path).append(actor="cli", event_type="x", scope_hash=None, target_id=None)

    assert (tmp_path / LOG_NAME).read_bytes() == before
    assert _head(tmp_path)["seq"] == 6


# -- torn tails -------------------------------------------------------------------------------


def test_a_torn_tail_is_repaired_with_a_warning_on_the_next_append(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _build_chain(tmp_path, n=8)
    stale_head = (tmp_path / HEAD_NAME).read_bytes()
    AuditLog(tmp_path).append(actor="cli", event_type="x", scope_hash=None, target_id=None)
    lines = _lines(tmp_path)
    torn = lines[-1][:37]
    _write_lines(tmp_path, [*lines[:-1], torn])  # the 9th write died half way
    (tmp_path / HEAD_NAME).write_bytes(stale_head)  # so its head write never happened
    assert AuditLog(tmp_path).verify().first_bad_line == 9

    with caplog.at_level(logging.WARNING, logger="memoryd.audit"):
        record = AuditLog(tmp_path).append(
            actor="cli", event_type="after-crash", scope_hash=None, target_id=None
        )

    assert record.seq == 9
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert str(tmp_path / LOG_NAME) in message
    assert "37 bytes" in message
    assert repr(torn) in message
    result = AuditLog(tmp_path).verify()
    assert result.ok, result.problem
    assert result.lines == 9


def test_repair_torn_tail_reports_whether_it_changed_anything(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = _build_chain(tmp_path, n=3)
    assert log.repair_torn_tail() is False
    with (tmp_path / LOG_NAME).open("ab") as f:
        f.write(b'{"actor":"cli","det')

    with caplog.at_level(logging.WARNING, logger="memoryd.audit"):
        assert log.repair_torn_tail() is True
        assert log.repair_torn_tail() is False

    assert "dropped a torn last line" in caplog.text
    assert log.verify().ok
    assert log.append(actor="cli", event_type="x", scope_hash=None, target_id=None).seq == 4


def test_a_torn_first_line_is_repaired(tmp_path: Path) -> None:
    (tmp_path / LOG_NAME).write_bytes(b'{"actor":"cl')

    assert AuditLog(tmp_path).repair_torn_tail() is True
    assert (tmp_path / LOG_NAME).read_bytes() == b""
    assert (
        AuditLog(tmp_path).append(actor="a", event_type="b", scope_hash=None, target_id=None).seq
        == 1
    )


def test_a_whole_last_record_missing_only_its_newline_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _build_chain(tmp_path, n=4)
    data = (tmp_path / LOG_NAME).read_bytes()
    (tmp_path / LOG_NAME).write_bytes(data[:-1])
    assert AuditLog(tmp_path).verify().ok  # the record is whole; only the newline is missing

    with caplog.at_level(logging.WARNING, logger="memoryd.audit"):
        assert AuditLog(tmp_path).repair_torn_tail() is True

    assert "had no newline" in caplog.text
    assert (tmp_path / LOG_NAME).read_bytes() == data


def test_a_torn_tail_after_a_line_longer_than_a_read_block(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    log.append(actor="cli", event_type="x", scope_hash=None, target_id=None)
    log.append(
        actor="cli", event_type="big", scope_hash=None, target_id=None, details={"b": "x" * 200_000}
    )
    with (tmp_path / LOG_NAME).open("ab") as f:
        f.write(b'{"actor":"cli","details":"' + b"y" * 100_000)

    fresh = AuditLog(tmp_path)
    assert fresh.repair_torn_tail() is True
    assert fresh.append(actor="cli", event_type="x", scope_hash=None, target_id=None).seq == 3
    assert fresh.verify().ok


def test_a_broken_line_that_is_not_last_is_never_repaired(tmp_path: Path) -> None:
    _build_chain(tmp_path, n=5)
    lines = _lines(tmp_path)
    lines[2] = b"garbage\n"
    _write_lines(tmp_path, lines)
    before = (tmp_path / LOG_NAME).read_bytes()

    assert AuditLog(tmp_path).repair_torn_tail() is False
    assert (tmp_path / LOG_NAME).read_bytes() == before
    assert AuditLog(tmp_path).verify().first_bad_line == 3


def test_a_broken_last_line_the_head_vouches_for_is_not_repaired(tmp_path: Path) -> None:
    _build_chain(tmp_path, n=5)
    lines = _lines(tmp_path)
    lines[-1] = lines[-1][:20]  # seq 5 was acknowledged (head says 5): this is not a crash
    _write_lines(tmp_path, lines)
    before = (tmp_path / LOG_NAME).read_bytes()

    with pytest.raises(AuditChainBroken, match="head anchor says seq 5"):
        AuditLog(tmp_path).repair_torn_tail()
    with pytest.raises(AuditChainBroken):
        AuditLog(tmp_path).append(actor="cli", event_type="x", scope_hash=None, target_id=None)

    assert (tmp_path / LOG_NAME).read_bytes() == before


def test_two_broken_last_lines_are_not_repaired(tmp_path: Path) -> None:
    _build_chain(tmp_path, n=5)
    (tmp_path / HEAD_NAME).unlink()
    _write_lines(tmp_path, [*_lines(tmp_path)[:-2], b"junk\n", b"more"])

    with pytest.raises(AuditChainBroken, match="last two lines"):
        AuditLog(tmp_path).repair_torn_tail()


# -- failures ---------------------------------------------------------------------------------


def test_a_failed_write_leaves_no_half_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _build_chain(tmp_path, n=3)
    before = (tmp_path / LOG_NAME).read_bytes()
    real_write = os.write

    def disk_fills_up(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 10:
            real_write(fd, bytes(data[:10]))
            return 10
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_fills_up)
    with pytest.raises(ResourceExhausted, match="disk is full") as caught:
        log.append(actor="cli", event_type="x", scope_hash=None, target_id=None)
    monkeypatch.undo()

    assert str(tmp_path / LOG_NAME) in str(caught.value)
    assert (tmp_path / LOG_NAME).read_bytes() == before
    assert log.append(actor="cli", event_type="x", scope_hash=None, target_id=None).seq == 4
    assert log.verify().ok


def test_an_unusable_directory_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")

    with pytest.raises(StorageError, match="file/audit"):
        AuditLog(tmp_path / "file" / "audit")


# -- threads ----------------------------------------------------------------------------------


def test_eight_threads_appending_make_one_valid_chain(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            barrier.wait()
            for i in range(25):
                if i % 5 == 0:
                    log.append_many([AuditEvent(actor=f"t{worker}", event_type="batch")] * 3)
                else:
                    log.append(
                        actor=f"t{worker}", event_type="single", scope_hash=None, target_id=None
                    )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    expected = 8 * (20 + 5 * 3)
    result = log.verify()
    assert result.ok, result.problem
    assert result.lines == expected
    assert [r.seq for r in log.read()] == list(range(1, expected + 1))
    assert _head(tmp_path)["seq"] == expected


# -- reading ----------------------------------------------------------------------------------


@pytest.fixture
def varied(tmp_path: Path) -> tuple[AuditLog, FakeClock]:
    clock = FakeClock(datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
    log = AuditLog(tmp_path, clock=clock)
    for day in range(10):
        log.append(
            actor="cli",
            event_type="capture" if day % 2 == 0 else "promote",
            scope_hash="aaaaaaaaaaaa" if day < 5 else "bbbbbbbbbbbb",
            target_id=f"m{day}",
        )
        clock.advance(days=1)
    return log, clock


def test_read_filters_and_orders_newest_last(varied: tuple[AuditLog, FakeClock]) -> None:
    log, _ = varied

    assert [r.target_id for r in log.read()] == [f"m{i}" for i in range(10)]
    assert [r.target_id for r in log.read(scope_hash="bbbbbbbbbbbb")] == [
        "m5",
        "m6",
        "m7",
        "m8",
        "m9",
    ]
    assert [r.target_id for r in log.read(event_type="promote")] == ["m1", "m3", "m5", "m7", "m9"]
    since = datetime(2026, 5, 8, 12, 0, tzinfo=UTC)
    assert [r.target_id for r in log.read(since=since)] == ["m7", "m8", "m9"]
    naive = datetime(2026, 5, 8, 12, 0)
    assert [r.target_id for r in log.read(since=naive)] == ["m7", "m8", "m9"]
    assert [
        r.target_id for r in log.read(scope_hash="aaaaaaaaaaaa", event_type="capture", since=since)
    ] == []


def test_read_limit_keeps_the_newest_and_offset_pages_back(
    varied: tuple[AuditLog, FakeClock],
) -> None:
    log, _ = varied

    assert [r.target_id for r in log.read(limit=3)] == ["m7", "m8", "m9"]
    assert [r.target_id for r in log.read(limit=3, offset=3)] == ["m4", "m5", "m6"]
    assert [r.target_id for r in log.read(limit=3, offset=9)] == ["m0"]
    assert [r.target_id for r in log.read(offset=8)] == ["m0", "m1"]
    assert [r.target_id for r in log.read(event_type="capture", limit=2)] == ["m6", "m8"]
    assert log.read(limit=0) == []
    with pytest.raises(InvalidInput):
        log.read(offset=-1)


def test_read_skips_broken_lines_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _build_chain(tmp_path, n=4)
    lines = _lines(tmp_path)
    lines[1] = b"garbage\n"
    _write_lines(tmp_path, lines)

    with caplog.at_level(logging.WARNING, logger="memoryd.audit"):
        records = AuditLog(tmp_path).read()

    assert [r.seq for r in records] == [1, 3, 4]
    assert "skipped 1 line(s) that are not audit records" in caplog.text


def test_read_with_a_limit_reads_backwards_across_blocks(tmp_path: Path) -> None:
    """Lines of ~400 bytes, so the newest 500 span several 64 KiB blocks read from the end."""
    log = AuditLog(tmp_path)
    log.append_many(
        [
            AuditEvent(actor="cli", event_type="even" if i % 2 == 0 else "odd", target_id=str(i))
            for i in range(1500)
        ]
    )
    everything = log.read()

    assert log.read(limit=500) == everything[-500:]
    assert log.read(limit=300, offset=700) == everything[-1000:-700]
    assert (
        log.read(event_type="odd", limit=400)
        == [r for r in everything if r.event_type == "odd"][-400:]
    )
    assert log.read(limit=5000) == everything
    assert log.read(limit=10, offset=1495) == everything[:5]


def test_read_ignores_a_torn_tail_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _build_chain(tmp_path, n=5)
    with (tmp_path / LOG_NAME).open("ab") as f:
        f.write(b'{"actor":"cli"')

    with caplog.at_level(logging.WARNING, logger="memoryd.audit"):
        assert [r.seq for r in AuditLog(tmp_path).read(limit=2)] == [4, 5]
        assert len(AuditLog(tmp_path).read()) == 5

    assert caplog.text.count("skipped 1 line(s)") == 2


def test_two_instances_on_one_directory_keep_one_chain(tmp_path: Path) -> None:
    first, second = AuditLog(tmp_path), AuditLog(tmp_path)
    for i in range(6):
        log = first if i % 2 == 0 else second
        log.append(actor="cli", event_type="x", scope_hash=None, target_id=str(i))

    assert first.verify().ok
    assert [r.target_id for r in second.read()] == [str(i) for i in range(6)]


def test_processes_appending_at_once_keep_one_chain(tmp_path: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from memoryd.audit import AuditLog, AuditEvent\n"
        "log = AuditLog(Path(sys.argv[1]))\n"
        "for i in range(30):\n"
        "    log.append_many([AuditEvent(actor=sys.argv[2], event_type='p')] * (1 + i % 3))\n"
    )
    workers = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), f"proc{n}"])
        for n in range(4)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0, 0, 0]

    result = AuditLog(tmp_path).verify()

    assert result.ok, result.problem
    assert result.lines == 4 * sum(1 + i % 3 for i in range(30))


def test_a_hash_that_is_not_sha256_hex_is_reported(pristine: Path, tmp_path: Path) -> None:
    shutil.copytree(pristine, tmp_path / "c")
    lines = _lines(tmp_path / "c")
    record = json.loads(lines[-1])
    record["this_hash"] = "sha256:\ud800"
    lines[-1] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    _write_lines(tmp_path / "c", lines)

    result = AuditLog(tmp_path / "c").verify()

    assert (result.first_bad_line, result.problem) == (
        CHAIN_LENGTH,
        f"line {CHAIN_LENGTH}: not an audit record (this_hash is not a sha256 hash)",
    )
    with pytest.raises(AuditChainBroken):
        AuditLog(tmp_path / "c").append(actor="a", event_type="b", scope_hash=None, target_id=None)


def _chain_checked_line_by_line(records: list[Any]) -> tuple[int, str] | None:
    """`check_chain` as it was: each parsed record encoded again and checked as a log line."""
    anchor = _GENESIS
    for index, obj in enumerate(records):
        raw = (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")
        checked = AuditLog._check_line(raw, index + 1, anchor, None)
        if isinstance(checked, str):
            return index, checked.split(": ", 1)[-1]
        anchor = checked
    return None


def test_a_carried_chain_checked_as_parsed_reports_what_its_lines_would(pristine: Path) -> None:
    """`check_chain` takes a sync file's records as parsed; every tamper gives the verdict
    (index and problem) that checking them as log lines gives."""
    records: list[Any] = [json.loads(line) for line in _lines(pristine)]

    def edited(k: int, field: str, value: object) -> list[Any]:
        copy = [dict(r) for r in records]
        copy[k][field] = value
        return copy

    variants: list[list[Any]] = [records, records[:0], records[:7]]
    for k in (0, 4, CHAIN_LENGTH - 1):
        variants += [
            edited(k, "actor", "mallory"),
            edited(k, "details", '{"n":-1}'),
            edited(k, "seq", "4"),
            edited(k, "prev_hash", GENESIS_HASH),
            edited(k, "this_hash", "sha256:" + "0" * 64),
            edited(k, "target_id", 7),
            edited(k, "note", "x"),
            [*records[:k], *records[k + 1 :]],
            [*records[: k + 1], records[k], *records[k + 1 :]],
            [*records[:k], [1, 2], *records[k + 1 :]],
            [*records[:k], {"seq": k + 1}, *records[k + 1 :]],
        ]
        if k + 1 < CHAIN_LENGTH:
            variants.append([*records[:k], records[k + 1], records[k], *records[k + 2 :]])
    verdicts = [check_chain(v) for v in variants]
    # Passing: the chain, its prefixes, line 1 "relinked" to the genesis hash it already
    # has, the last line removed (no head here); every other variant is caught.
    assert [i for i, v in enumerate(verdicts) if v is None] == [0, 1, 2, 6, len(variants) - 4]
    assert verdicts == [_chain_checked_line_by_line(v) for v in variants]


def test_scan_yields_what_read_filters_though_it_parses_only_lines_that_may_match(
    tmp_path: Path,
) -> None:
    """`scan` passes over a line without a wanted type, quoted, or any escape; a type
    written with a JSON escape, or a type's name in another record's details, still
    comes out as `read` has it."""
    log = AuditLog(tmp_path)
    types = ("record", "entity_merge", "promote")
    log.append_many(
        [
            AuditEvent(
                actor="cli",
                event_type=types[i % 3],
                scope_hash=f"{i:012x}",
                target_id=f"m{i}",
                details={"n": i, "said": "entity_merge" if i % 4 == 0 else "x"},
            )
            for i in range(12)
        ]
    )
    lines = _lines(tmp_path)
    assert b'"event_type":"record"' in lines[3]
    assert b"\\u" not in b"".join(lines)
    lines[3] = lines[3].replace(b'"event_type":"record"', b'"event_type":"\\u0072ecord"')
    _write_lines(tmp_path, lines)

    for wanted in (["record"], ["entity_merge"], ["promote", "record"], ["decay"]):
        read = [r.model_dump() for r in log.read() if r.event_type in wanted]
        scanned = [AuditRecord.model_validate(obj).model_dump() for obj in log.scan(wanted)]
        assert scanned == read
    assert "m3" in [obj["target_id"] for obj in log.scan(["record"])]
