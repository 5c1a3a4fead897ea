"""Plan, back up, write and undo changes to files memoryd does not own.

Every write is atomic and keeps the file's permission bits (`~/.claude.json` holds tokens).
Before a file is changed it is copied to `<file>.memoryd-backup-<UTC time>`, and each write is
recorded in `<home>/setup/history.jsonl` with the backup, whether the file existed, and the
sha256 of what memoryd wrote, so `undo` can restore it and refuse when someone changed the
file since. A change that leaves the text as it was writes nothing and records nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.errors import Conflict, InvalidInput, NotFound
from memoryd.vault import fsync_dir, storage_error

if TYPE_CHECKING:
    from tomlkit.toml_document import TOMLDocument

BACKUP_INFIX = ".memoryd-backup-"
_FIX = "fix the file by hand (or move it away) and run setup again; nothing was written"


@dataclass(frozen=True)
class FileChange:
    """One file's text before (None: it does not exist) and after the change."""

    path: Path
    before: str | None
    after: str

    @property
    def status(self) -> str:
        if self.before == self.after:
            return "unchanged"
        return "created" if self.before is None else "updated"

    def diff(self) -> str:
        if self.before == self.after:
            return ""
        return "".join(
            difflib.unified_diff(
                (self.before or "").splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile="/dev/null" if self.before is None else str(self.path),
                tofile=str(self.path),
            )
        )


@dataclass
class Written:
    path: Path
    status: str
    backup: Path | None = None
    created_dirs: list[Path] = field(default_factory=list)


def real_path(path: Path) -> Path:
    """Write through a symlink (dotfile managers link configs in) instead of replacing it."""
    return path.resolve() if path.is_symlink() else path


def read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error(exc, path, "reading") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not UTF-8 text (byte {exc.start})", hint=_FIX) from exc


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def parse_json(text: str | None, path: Path) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})", hint=_FIX
        ) from exc
    if not isinstance(doc, dict):
        start = len(text) - len(text.lstrip())
        raise InvalidInput(
            f"{path}:{_line_of(text, start)}: the top level is not a JSON object", hint=_FIX
        )
    return doc


_INDENT = re.compile(r"^[{\[][^\S\n]*\n([ \t]+)\S", re.MULTILINE)


def render_json(doc: dict[str, Any], before: str | None) -> str:
    """JSON in the file's own indent (2 spaces for a new file), ending as the file did."""
    found = _INDENT.search(before or "")
    indent: str | int = found.group(1) if found else 2
    text = json.dumps(doc, indent=indent, ensure_ascii=False)
    if before is None or before.endswith("\n") or not before.strip():
        text += "\n"
    return text


def plan_json(path: Path, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> FileChange:
    path = real_path(path)
    before = read_text(path)
    doc = parse_json(before, path)
    new = edit(doc)
    if before is not None and new == doc and _same_order(new, doc):
        return FileChange(path, before, before)
    return FileChange(path, before, render_json(new, before))


def _same_order(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same_order(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return all(_same_order(x, y) for x, y in zip(a, b, strict=True))
    return True


def plan_toml(path: Path, edit: Callable[[TOMLDocument], None]) -> FileChange:
    import tomlkit
    from tomlkit.exceptions import ParseError

    path = real_path(path)
    before = read_text(path)
    try:
        doc = tomlkit.parse(before or "")
    except ParseError as exc:
        raise InvalidInput(
            f"{path}:{exc.line}:{exc.col}: not valid TOML ({exc})", hint=_FIX
        ) from exc
    edit(doc)
    return FileChange(path, before, tomlkit.dumps(doc))


# -- writing ------------------------------------------------------------------------------------
def _now() -> datetime:
    return datetime.now(UTC)


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write so a reader sees the old file or the new one; `mode` is set before the rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise storage_error(exc, path, "writing") from exc


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error(exc, path, "reading") from exc


def make_dirs(directory: Path) -> list[Path]:
    """Create `directory` and its missing parents; the ones created, outermost first."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()][::-1]
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, directory, "creating") from exc
    return missing


def backup(path: Path, now: datetime) -> Path:
    """Copy `path` beside itself, named by the UTC time (with a counter if that name is taken)."""
    stem = f"{path.name}{BACKUP_INFIX}{now.astimezone(UTC):%Y%m%dT%H%M%SZ}"
    target = path.with_name(stem)
    counter = 1
    while target.exists():
        counter += 1
        target = path.with_name(f"{stem}-{counter}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise storage_error(exc, path, "reading") from exc
    write_atomic(target, data, _mode(path))
    return target


def write_with_backup(path: Path, text: str, now: datetime) -> Written:
    """Write `text` to `path` after backing up what was there; nothing when it is the same."""
    before = read_text(path)
    if before == text:
        return Written(path, "unchanged")
    created = make_dirs(path.parent)
    saved = backup(path, now) if before is not None else None
    write_atomic(path, text.encode("utf-8"), _mode(path))
    return Written(path, "created" if before is None else "updated", saved, created)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the manifest -------------------------------------------------------------------------------
class Manifest:
    """`<home>/setup/history.jsonl`: one line per file written, one per undo."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[dict[str, Any]]:
        text = read_text(self.path)
        records: list[dict[str, Any]] = []
        for number, line in enumerate((text or "").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise InvalidInput(
                    f"{self.path}:{number}: not a JSON line", hint="fix or remove that line"
                ) from exc
            if isinstance(record, dict):
                records.append(record)
        return records

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        if not lines:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(lines)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise storage_error(exc, self.path, "writing") from exc


def apply(
    changes: Iterable[FileChange],
    manifest: Manifest,
    *,
    command: str,
    agent: str,
    scope: str,
    now: datetime | None = None,
) -> list[Written]:
    """Write each changed file (backup first) and record it; unchanged files are left alone."""
    at = now or _now()
    run = f"{at:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
    results: list[Written] = []
    records: list[dict[str, Any]] = []
    for change in changes:
        if change.status == "unchanged":
            results.append(Written(change.path, "unchanged"))
            continue
        written = write_with_backup(change.path, change.after, at)
        results.append(written)
        records.append(
            {
                "run": run,
                "time": at.isoformat(),
                "command": command,
                "agent": agent,
                "scope": scope,
                "path": str(change.path),
                "existed": change.before is not None,
                "backup": str(written.backup) if written.backup else None,
                "sha256": sha256(change.after.encode("utf-8")),
                "created_dirs": [str(d) for d in written.created_dirs],
            }
        )
    manifest.append(records)
    return results


# -- undo ---------------------------------------------------------------------------------------
@dataclass
class Restored:
    path: Path
    action: str  # "restored" | "deleted"
    run: str
    agent: str
    backup: Path | None


def _current_sha(path: Path) -> str | None:
    try:
        return sha256(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error(exc, path, "reading") from exc


def undo(
    manifest: Manifest,
    *,
    agent: str | None = None,
    every: bool = False,
    force: bool = False,
    dry_run: bool = False,
    now: datetime | None = None,
) -> list[Restored]:
    """Restore the files of the latest setup run (of `agent`), or of every run not yet undone.

    All checks run before anything is written: a file changed since memoryd wrote it is a
    Conflict (unless `force`), so an undo never half-happens. `dry_run` runs the same checks
    and says what would be restored or deleted, writing nothing (the history neither).
    """
    records = manifest.read()
    undone = {r["undo"] for r in records if isinstance(r.get("undo"), str)}
    runs: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        run = record.get("run")
        mine = agent is None or record.get("agent") == agent
        if isinstance(run, str) and run not in undone and "path" in record and mine:
            runs.setdefault(run, []).append(record)
    chosen = list(runs)[::-1]
    if not chosen:
        who = f" for {agent}" if agent else ""
        raise NotFound(f"no setup change to undo{who}", hint=f"the history is {manifest.path}")
    if not every:
        chosen = chosen[:1]
    expected: dict[Path, str | None] = {}
    for run in chosen:
        for record in reversed(runs[run]):
            path = Path(record["path"])
            current = expected[path] if path in expected else _current_sha(path)
            if current != record.get("sha256") and not force:
                raise Conflict(
                    f"{path} changed since memoryd wrote it (setup run {run}); nothing was undone",
                    hint="check the file, then run `memoryd setup undo --force` to restore anyway",
                )
            saved = Path(record["backup"]) if record.get("backup") else None
            if saved is not None and not saved.exists():
                raise NotFound(f"the backup {saved} of {path} is gone; nothing was undone")
            expected[path] = _current_sha(saved) if saved is not None else None
    if dry_run:
        return [_planned(record, run) for run in chosen for record in reversed(runs[run])]
    done: list[Restored] = []
    for run in chosen:
        for record in reversed(runs[run]):
            done.append(_restore(record, run))
        manifest.append([{"undo": run, "time": (now or _now()).isoformat()}])
    return done


def _planned(record: dict[str, Any], run: str) -> Restored:
    """What `_restore` would do with this record."""
    saved = Path(record["backup"]) if record.get("backup") else None
    action = "restored" if saved is not None else "deleted"
    return Restored(Path(record["path"]), action, run, str(record.get("agent", "")), saved)


def _restore(record: dict[str, Any], run: str) -> Restored:
    path = Path(record["path"])
    saved = Path(record["backup"]) if record.get("backup") else None
    agent = str(record.get("agent", ""))
    if saved is not None:
        try:
            data = saved.read_bytes()
        except OSError as exc:
            raise storage_error(exc, saved, "reading") from exc
        make_dirs(path.parent)
        write_atomic(path, data, _mode(saved))
        return Restored(path, "restored", run, agent, saved)
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise storage_error(exc, path, "removing") from exc
    for directory in reversed([Path(d) for d in record.get("created_dirs", [])]):
        with contextlib.suppress(OSError):  # not empty: someone put files there since
            directory.rmdir()
    return Restored(path, "deleted", run, agent, None)
