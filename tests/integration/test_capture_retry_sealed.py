"""`memoryd capture retry` replays the payloads of sensitive scopes the hook kept sealed in
`inbox/failed/`: opened only where the scope key is (the in-process service, or the daemon
when one serves the home), captured again sealed, and merged by the drain; without the key
the file stays and the error names `memoryd sensitive import-key`."""

from __future__ import annotations

import io
import json
from pathlib import Path

from memoryd.capture.hook import main as capture_main
from memoryd.config import Settings
from memoryd.sensitive.files import encrypted_files
from memoryd.sensitive.sealed import waiting_captures
from memoryd.wiring import open_service
from tests.daemon_harness import running
from tests.integration.test_capture import capture
from tests.integration.test_capture_sealed import marked, transcript  # noqa: F401 (fixture)
from tests.integration.test_sensitive_mark import leaks


def retry(home: Path) -> tuple[int, str]:
    out = io.StringIO()
    code = capture_main(["retry", f"--home={home}"], stdout=out)
    return code, out.getvalue()


def fail_a_capture(home: Path, project: Path, tmp_path: Path) -> tuple[Path, bytes, Path]:
    """A Stop whose transcript is not there yet: the hook keeps the payload sealed. Returns
    the transcript's path and bytes (to put back) and the sealed file."""
    session = transcript(tmp_path, project, "late-transcript")
    data = session.path.read_bytes()
    session.path.unlink()
    capture(home, "claude-code", session.payload("Stop"))
    [kept] = sorted((home / "inbox" / "failed").iterdir())
    assert kept.suffix == ".sealed"
    return session.path, data, kept


def sessions_of(home: Path, scope_hash: str) -> list[Path]:
    return [p for p in encrypted_files(home, scope_hash) if p.parent.name == "sessions"]


def test_retry_replays_a_sealed_failed_payload_in_process(
    settings: Settings,
    home: Path,
    project: Path,
    tmp_path: Path,
    marked: str,  # noqa: F811
) -> None:
    path, data, kept = fail_a_capture(home, project, tmp_path)
    path.write_bytes(data)  # the transcript is there now
    code, out = retry(home)
    assert code == 0, out
    assert "1 processed, 0 still failing" in out
    assert not kept.exists()
    assert waiting_captures(home) == []  # captured again, sealed, and drained
    [session] = sessions_of(home, marked)
    with open_service(settings) as svc:
        assert "Zorblax7731" in svc.vault.read(session).body
    assert leaks(home) == []


def test_retry_without_the_key_names_import_key_and_keeps_the_file(
    settings: Settings, home: Path, project: Path, tmp_path: Path, marked: str,  # noqa: F811
    file_keyring: object,
) -> None:  # fmt: skip
    path, data, kept = fail_a_capture(home, project, tmp_path)
    path.write_bytes(data)
    sealed = kept.read_bytes()
    key_id = json.loads((home / "scopes" / marked / "key.json").read_text())["current"]
    file_keyring.delete_password("memoryd-sensitive", f"{marked}:{key_id}")  # type: ignore[attr-defined]
    code, out = retry(home)
    assert code == 1
    assert "0 processed, 1 still failing" in out
    assert kept.name in out
    assert "memoryd sensitive import-key" in out
    assert kept.read_bytes() == sealed  # kept as it was: sealed, untouched
    assert sessions_of(home, marked) == []
    assert leaks(home) == []


def test_a_payload_that_still_fails_stays_sealed(
    home: Path,
    project: Path,
    tmp_path: Path,
    marked: str,  # noqa: F811
) -> None:
    _, _, kept = fail_a_capture(home, project, tmp_path)  # the transcript is still missing
    sealed = kept.read_bytes()
    code, out = retry(home)
    assert code == 1
    assert "1 still failing" in out
    assert "missing or unreadable" in out
    assert kept.read_bytes() == sealed
    assert leaks(home) == []


def test_retry_through_the_daemon_opens_the_payload_there(
    home: Path,
    project: Path,
    tmp_path: Path,
    marked: str,  # noqa: F811
) -> None:
    path, data, kept = fail_a_capture(home, project, tmp_path)
    path.write_bytes(data)
    with running(home) as daemon:
        code, out = retry(home)
        assert code == 0, out + daemon.log_text()
        assert "1 processed" in out
        assert not kept.exists()
        assert waiting_captures(home) == []  # the daemon drained the box the replay sealed
        assert len(sessions_of(home, marked)) == 1
        assert daemon.stop() == 0
    assert leaks(home) == []
