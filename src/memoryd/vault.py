"""The vault: markdown memory files with YAML frontmatter, the source of truth.

Layout (DESIGN.md §3): `scopes/<scope_hash>/<type>s/<slug>.md`, `scopes/<hash>/scope.json`,
`scopes/<hash>/forgotten/`. A sensitive scope's memories are `<slug>.md.enc`: the vault seals
and opens them through the `FileCipher` it is given (`memoryd.sensitive.files.ScopeCipher`);
without one it refuses to write them and cannot read them. `iter_files` lists plaintext only.
Every write is atomic: temp file, fsync, rename, fsync of the directory.

Decay state lives in the vault in two places besides a file's own frontmatter, so a decay
sweep never rewrites a memory file (`memoryd.governance.decay` says why):
* `scopes/<hash>/forgotten/` is authoritative: a file the sweep moved there with a plain
  rename (its frontmatter still says where it was) reads as forgotten, `forgotten_at` the
  sweep's time;
* `scopes/<hash>/decay.jsonl`, the scope's decay ledger, append-only (compacted to one line
  per memory): `{"slug", "from", "to", "at", "basis"}` per move. A line holds while the
  file's `last_recalled_at` is still its `basis` (a recall, a get or a restore writes a new
  one, and so revives the memory without touching the ledger) and only moves a state
  forward. A forget whose rename never happened (a crash between the two) reads as the
  line's `from`. It holds slugs, states and times only: a sensitive scope's slugs are
  opaque, so the sweep moves its memories without the scope key.
`Vault.read` applies both, so every reader (reindex, get, export, restore) sees the state.

Over 600 lines: the file format (rendering and parsing) and the store that lays the files out
share the layout and its rules; split, each would import the other's internals.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from memoryd.bulkfiles import BulkWriteError, sync_filesystem, write_new_files
from memoryd.errors import (
    BrokenMemoryFile,
    MissingKey,
    NotFound,
    ResourceExhausted,
    StorageError,
)
from memoryd.models import DecayState, Frontmatter, Memory, MemoryType, ScopeInfo, format_ts
from memoryd.private import FILE_MODE, make_private_dir

logger = logging.getLogger(__name__)

ENCRYPTED_SUFFIX = ".md.enc"
FORGOTTEN_DIR = "forgotten"
SCOPES_DIR = "scopes"
DECAY_LEDGER = "decay.jsonl"
_RANK = {state: rank for rank, state in enumerate(DecayState)}
_TYPE_DIRS = {t.dir_name for t in MemoryType}


class FileCipher(Protocol):
    """Seals and opens a sensitive memory file, bound to its scope and slug."""

    def seal(self, plaintext: bytes, scope_hash: str, slug: str) -> bytes: ...

    def open(self, blob: bytes, scope_hash: str, slug: str, path: Path) -> bytes: ...


def storage_error(exc: OSError, path: Path, action: str) -> StorageError:
    """Turn an OSError into the error a user can act on (full disk, read-only dir …)."""
    if exc.errno == errno.ENOSPC:
        return ResourceExhausted(
            f"disk full while {action} {path}; nothing was changed",
            hint="free some disk space and run the command again",
        )
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StorageError(
            f"cannot write {path}: {exc.strerror} (the data dir is read-only)",
            hint="make the data dir writable, or point MEMORYD_HOME/--home at a writable dir",
        )
    return StorageError(f"{action} {path} failed: {exc.strerror or exc}")


_PLAIN = re.compile(r"^[A-Za-z\u00c0-\uffff_/][\w\u00c0-\uffff ./()+-]*$")
_YAML_WORDS = {"yes", "no", "on", "off", "true", "false", "null", "y", "n"}
_NOT_YAML = re.compile("[\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")
"""Characters YAML does not allow in a document even quoted (DEL, C1 controls): written as
`\\uXXXX` escapes, or a title holding one would make its own file unreadable."""


def _scalar(value: Any) -> str:
    """One YAML scalar. Strings are plain when unambiguous, else JSON-quoted (valid YAML)."""
    if type(value) is str:
        return _text(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if "." in text and "e" not in text else f"{value:.6f}"
    return _text(str(value))


@functools.lru_cache(maxsize=4096)
def _text(text: str) -> str:
    """A string as a YAML scalar, remembered: most of a file's values (type, scope, source,
    tags, decay state) repeat across a bulk write's files."""
    if (
        _PLAIN.match(text)
        and not text.endswith(" ")
        and " #" not in text
        and text.lower() not in _YAML_WORDS
        and not _NOT_YAML.search(text)
    ):
        return text
    quoted = encode_basestring(text)  # `json.dumps(text, ensure_ascii=False)`, without its encoder
    return _NOT_YAML.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


_STR_ONLY = frozenset({str})


def _emit(data: dict[str, Any], indent: str = "") -> list[str]:
    """Block mappings, inline lists of scalars (`tags: [react, solid]`), as seeds/001 writes.

    Hand-rolled because PyYAML's Python representer was the slowest step of bulk ingest; the
    output is read back with the C loader and round-trip tested.
    """
    lines: list[str] = []
    for key, value in data.items():
        kind = type(value)
        # The common values first, without a call per value: a string, a list of strings
        # (tags, observations). The output is `_scalar`'s.
        if kind is str:
            lines.append(f"{indent}{key}: {_text(value)}")
        elif kind is list and {*map(type, value)} <= _STR_ONLY:
            lines.append(f"{indent}{key}: [{', '.join(map(_text, value))}]")
        elif isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.extend(_emit(value, indent + "  "))
        elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
            lines.append(f"{indent}{key}:")
            for item in value:
                if isinstance(item, dict):
                    nested = _emit(item, indent + "  ")
                    lines.append(f"{indent}- {nested[0].lstrip()}")
                    lines.extend(nested[1:])
                else:
                    lines.append(f"{indent}- {_scalar(item)}")
        elif isinstance(value, list):
            lines.append(f"{indent}{key}: [{', '.join(_scalar(v) for v in value)}]")
        else:
            lines.append(f"{indent}{key}: {_scalar(value)}")
    return lines


def file_slug(path: Path) -> str:
    """The slug a memory file is named after (`<slug>.md` or `<slug>.md.enc`)."""
    return path.name.removesuffix(ENCRYPTED_SUFFIX).removesuffix(".md")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one, never half of one."""
    try:
        make_private_dir(path.parent)
    except OSError as exc:
        raise storage_error(exc, path.parent, "creating") from exc
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a read-only fs can't even remove the temp name
            tmp.unlink(missing_ok=True)
        raise storage_error(exc, path, "writing") from exc


def _ends_in_newline(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return os.pread(fd, 1, size - 1) == b"\n"


def render(memory: Memory) -> str:
    """Frontmatter, a blank line, the body: what a person expects to open in an editor."""
    header = "\n".join(_emit(memory.meta.to_yaml_dict()))
    return f"---\n{header}\n---\n\n{memory.body}\n"


def parse(text: str, path: Path) -> Memory:
    """Parse a memory file; every problem names the file and what to fix."""
    if not text.startswith("---"):
        raise BrokenMemoryFile(f"{path}: no frontmatter (the file must start with a '---' line)")
    lines = text.split("\n")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if end is None:
        raise BrokenMemoryFile(f"{path}: frontmatter is not closed by a '---' line")
    import yaml  # (a file read: opening the stores and recalling read none)

    # The C loader is many times faster (bench/RESULTS.md); reindex of 100k files needs it.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load("\n".join(lines[1:end]), Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise BrokenMemoryFile(f"{path}:{where} invalid YAML frontmatter: {problem}") from exc
    if not isinstance(data, dict):
        raise BrokenMemoryFile(f"{path}: frontmatter is not a mapping of fields")
    try:
        meta = Frontmatter.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "frontmatter"
        raise BrokenMemoryFile(f"{path}: frontmatter field '{field}': {first['msg']}") from exc
    body = "\n".join(lines[end + 1 :])
    if body.startswith("\n"):
        body = body[1:]
    if body.endswith("\n"):
        body = body[:-1]
    return Memory(meta=meta, body=body, path=path)


@dataclass(frozen=True, slots=True)
class DecayEntry:
    """The last decay move the ledger holds for one memory."""

    from_state: DecayState
    to_state: DecayState
    at: str
    """When the sweep moved it (ISO, UTC)."""
    basis: str | None
    """The memory's `last_recalled_at` then (None: never recalled): the line holds only
    while the file still says so."""


def decay_line(
    slug: str, from_state: DecayState, to_state: DecayState, at: datetime, basis: datetime | None
) -> str:
    """One ledger line (with its newline): a JSON object, written by hand since a sweep
    writes 100k of them (the states are enum values and the times ISO: nothing to escape; a
    slug only when it holds what JSON escapes, which memoryd's own slugs never do)."""
    based = "null" if basis is None else f'"{format_ts(basis)}"'
    name = f'"{slug}"' if _JSON_PLAIN.fullmatch(slug) else json.dumps(slug, ensure_ascii=False)
    return (
        f'{{"slug":{name},"from":"{_STATE_TEXT[from_state]}","to":"{_STATE_TEXT[to_state]}",'
        f'"at":"{_sweep_time(at)}","basis":{based}}}\n'
    )


_JSON_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')
"""Text that JSON (`ensure_ascii=False`) writes as it is, between quotes."""
_STATE_TEXT = {state: state.value for state in DecayState}


@functools.lru_cache(maxsize=4)
def _sweep_time(at: datetime) -> str:
    """`format_ts(at)`: every line of a sweep has the same `at`, formatted once."""
    return format_ts(at)


def _ledger_text(entries: Iterable[tuple[str, DecayEntry]]) -> bytes:
    """Ledger lines for these (slug, last move) pairs."""
    return "".join(
        decay_line(
            slug,
            e.from_state,
            e.to_state,
            datetime.fromisoformat(e.at),
            None if e.basis is None else datetime.fromisoformat(e.basis),
        )
        for slug, e in entries
    ).encode("utf-8")


def _read_ledger(path: Path) -> tuple[dict[str, DecayEntry], int]:
    """slug → its last entry, and how many lines the ledger has. A torn last line (a crash
    while appending: its write never finished, so its move did not happen) is skipped."""
    entries: dict[str, DecayEntry] = {}
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return entries, 0
    except OSError as exc:
        raise storage_error(exc, path, "reading") from exc
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            entry = DecayEntry(
                DecayState(obj["from"]), DecayState(obj["to"]), str(obj["at"]), obj["basis"]
            )
            entries[str(obj["slug"])] = entry
        except (ValueError, KeyError, TypeError):
            if number < len(lines) - 1:  # not the torn tail: someone edited the ledger
                logger.warning("%s line %d is not a decay move; ignored", path, number)
    return entries, len(lines) - 1


def _settle_decay(memory: Memory, entry: DecayEntry | None, in_forgotten: bool) -> None:
    """`memory` (just parsed from its file) in the decay state its ledger line and its
    folder give it (see the module docstring)."""
    meta = memory.meta
    if in_forgotten and meta.decay_state is not DecayState.FORGOTTEN:
        # Moved there by a sweep with a plain rename (`archive` writes `forgotten` itself).
        meta.decay_state = DecayState.FORGOTTEN
        if meta.forgotten_at is None and entry is not None:
            forgot = entry.to_state is DecayState.FORGOTTEN
            meta.forgotten_at = datetime.fromisoformat(entry.at) if forgot else meta.updated_at
        elif meta.forgotten_at is None:
            meta.forgotten_at = meta.updated_at  # its ledger line is lost: the folder says it
        return
    if entry is None:
        return
    recalled = meta.last_recalled_at
    if entry.basis != (None if recalled is None else format_ts(recalled)):
        return  # used since the sweep: revived
    state = entry.to_state
    if state is DecayState.FORGOTTEN and not in_forgotten:
        state = entry.from_state  # the rename never happened
    if _RANK[state] > _RANK[meta.decay_state]:
        meta.decay_state = state


def rebased(path: str, scopes_dir: Path) -> str:
    """`path`, a memory file recorded under another home's `scopes/`, as the same file of the
    vault at `scopes_dir` (`scopes/<hash>/<folder>/<file>`): the graph and the journal keep
    the paths they were given, so a home that was moved or copied must have them point at its
    own files, never at the old place's (a copy's source still holds them). Any other path,
    or one already under `scopes_dir`, is returned as it is."""
    prefix = os.path.join(scopes_dir, "")
    if not path or path.startswith(prefix):
        return path
    parts = Path(path).parts
    if len(parts) < 5 or parts[-4] != SCOPES_DIR:
        return path
    return prefix + os.path.join(*parts[-3:])


class Vault:
    """The markdown files under `<home>/scopes`."""

    def __init__(self, home: Path, cipher: FileCipher | None = None) -> None:
        self.home = home
        self.scopes_dir = home / SCOPES_DIR
        self.cipher = cipher
        self._ledgers: dict[str, tuple[tuple[int, int, int], dict[str, DecayEntry], int]] = {}
        self._dirs: dict[tuple[str, MemoryType], Path] = {}
        """(scope hash, type) → its directory: a bulk write names 5000 files a batch."""

    # -- scopes ---------------------------------------------------------------------------
    def scope_dir(self, scope_hash: str) -> Path:
        return self.scopes_dir / scope_hash

    def write_scope(self, info: ScopeInfo) -> None:
        path = self.scope_dir(info.scope_hash) / "scope.json"
        data = json.dumps(info.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"
        try:
            if path.is_file() and path.read_text(encoding="utf-8") == data:
                return
        except OSError as exc:
            raise storage_error(exc, path, "reading") from exc
        atomic_write(path, data.encode("utf-8"))

    def read_scope(self, scope_hash: str) -> ScopeInfo | None:
        path = self.scope_dir(scope_hash) / "scope.json"
        try:
            return ScopeInfo.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            logger.warning("ignoring unreadable scope file %s: %s", path, exc)
            return None

    def scopes(self) -> list[ScopeInfo]:
        if not self.scopes_dir.is_dir():
            return []
        found = (self.read_scope(p.name) for p in sorted(self.scopes_dir.iterdir()) if p.is_dir())
        return [s for s in found if s is not None]

    # -- memories -------------------------------------------------------------------------
    def path_for(self, memory: Memory) -> Path:
        meta = memory.meta
        suffix = ENCRYPTED_SUFFIX if memory.sensitive else ".md"
        key = (meta.scope_hash, meta.type)
        directory = self._dirs.get(key)
        if directory is None:
            directory = self._dirs[key] = self.scope_dir(meta.scope_hash) / meta.type.dir_name
        return directory / f"{meta.slug}{suffix}"

    def write(self, memory: Memory, *, sync: bool = True, data: bytes | None = None) -> Path:
        """Write the memory file atomically and return its path (sealed when sensitive).
        `data`: its bytes as `file_bytes` gave them (a caller that writes the file on
        another thread renders it on its own, so that thread only waits on the disk)."""
        path = memory.path or self.path_for(memory)
        atomic_write(path, self._file_bytes(memory, path) if data is None else data, sync=sync)
        return path

    def file_bytes(self, memory: Memory) -> bytes:
        """What `write` writes into the memory's file."""
        return self._file_bytes(memory, memory.path or self.path_for(memory))

    def write_many(self, memories: Sequence[Memory], written: list[Path]) -> None:
        """Write many memory files, each atomically (`bulkfiles`), durable only after
        `sync_all`. `written` receives every path written, also when one fails: the first
        failure is raised once the others have stopped, for the caller to undo."""
        files = []
        for memory in memories:
            path = memory.path or self.path_for(memory)
            files.append((path, functools.partial(self._file_bytes, memory, path)))
        try:
            write_new_files(files, written)
        except BulkWriteError as exc:
            raise storage_error(exc.error, exc.path, "writing") from exc

    def _file_bytes(self, memory: Memory, path: Path) -> bytes:
        """What the memory's file holds: markdown, sealed when sensitive."""
        if memory.sensitive or path.name.endswith(ENCRYPTED_SUFFIX):
            if self.cipher is None or not memory.sensitive:
                raise StorageError(
                    f"memory {memory.slug} is in a sensitive scope; it must be written encrypted",
                    hint="open the service with the scope keys (memoryd.wiring does)",
                )
            if not path.name.endswith(ENCRYPTED_SUFFIX):
                raise StorageError(f"{path}: a sensitive memory's file must end in .md.enc")
            return self.cipher.seal(
                render(memory).encode("utf-8"), memory.meta.scope_hash, memory.slug
            )
        return render(memory).encode("utf-8")

    def read(self, path: Path) -> Memory:
        try:
            raw = path.read_bytes()
        except FileNotFoundError as exc:
            raise NotFound(
                f"memory file {path} is missing (deleted outside memoryd?)",
                hint="run `memoryd reindex` to drop it from the index",
            ) from exc
        except OSError as exc:
            raise storage_error(exc, path, "reading") from exc
        sealed = path.name.endswith(ENCRYPTED_SUFFIX)
        if sealed:
            if self.cipher is None:
                raise MissingKey(f"{path} is encrypted and this service holds no scope keys")
            raw = self.cipher.open(
                raw, path.parent.parent.name, path.name.removesuffix(ENCRYPTED_SUFFIX), path
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BrokenMemoryFile(f"{path}: not UTF-8 text (byte {exc.start})") from exc
        memory = parse(text, path)
        memory.sensitive = sealed
        entry = self.decay_ledger(memory.meta.scope_hash).get(memory.meta.slug)
        _settle_decay(memory, entry, path.parent.name == FORGOTTEN_DIR)
        return memory

    # -- the decay ledger -----------------------------------------------------------------
    def decay_ledger_path(self, scope_hash: str) -> Path:
        return self.scope_dir(scope_hash) / DECAY_LEDGER

    def ledger_scopes(self) -> list[str]:
        """The scopes that have a decay ledger."""
        if not self.scopes_dir.is_dir():
            return []
        return sorted(p.parent.name for p in self.scopes_dir.glob(f"*/{DECAY_LEDGER}"))

    def decay_ledger(self, scope_hash: str) -> dict[str, DecayEntry]:
        """slug → the last decay move of it in the scope's ledger (read once per change of
        the file: a reindex reads it once)."""
        return self._ledger(scope_hash)[0]

    def _ledger(self, scope_hash: str) -> tuple[dict[str, DecayEntry], int]:
        path = self.decay_ledger_path(scope_hash)
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return {}, 0
        except OSError as exc:
            raise storage_error(exc, path, "reading") from exc
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        cached = self._ledgers.get(scope_hash)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        entries, lines = _read_ledger(path)
        self._ledgers[scope_hash] = (key, entries, lines)
        return entries, lines

    def append_decay(self, scope_hash: str, lines: Sequence[str], *, sync: bool = True) -> int:
        """Append moves to the scope's ledger (`decay_line`), in one write and one fsync;
        returns the bytes appended."""
        path = self.decay_ledger_path(scope_hash)
        data = "".join(lines).encode("utf-8")
        try:
            make_private_dir(path.parent)
            created = not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
            try:
                if os.fstat(fd).st_size and not _ends_in_newline(fd):
                    data = b"\n" + data  # after a torn line: that line stays torn alone
                os.write(fd, data)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if created and sync:
                fsync_dir(path.parent)
        except OSError as exc:
            raise storage_error(exc, path, "appending to") from exc
        return len(data)

    def compact_decay(self, scope_hash: str, appended: int = 0) -> bool:
        """Rewrite the scope's ledger with one line per memory (its last move) once most of
        its lines are superseded; whether it did. Only the decay sweep writes the ledger.
        `appended`: the bytes the caller just appended, one line per memory; when they are
        half the file or more, at most half its lines can be superseded, and the file is
        not even read."""
        path = self.decay_ledger_path(scope_hash)
        try:
            if path.stat().st_size <= 2 * appended:
                return False
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise storage_error(exc, path, "reading") from exc
        entries, lines = self._ledger(scope_hash)
        if lines <= 2 * len(entries) + 1000:
            return False
        atomic_write(self.decay_ledger_path(scope_hash), _ledger_text(entries.items()))
        return True

    def carry_decay(self, scope_hash: str, renamed: Mapping[str, str]) -> None:
        """Append, for memories about to be renamed (old slug → new), their last move under
        the new slug: `sensitive mark` seals a scope's memories under opaque slugs, and the
        states the ledger gave them must hold under those. The old lines go with
        `drop_decay` once the old files are gone (a mark killed in between runs again)."""
        entries = self.decay_ledger(scope_hash)
        moved = [(renamed[slug], e) for slug, e in entries.items() if slug in renamed]
        if moved:
            self.append_decay(scope_hash, [_ledger_text(moved).decode("utf-8")])

    def drop_decay(self, scope_hash: str, slugs: Iterable[str]) -> None:
        """Rewrite the scope's ledger without these memories' lines (atomically): after a
        mark, no line names a sensitive memory by its title-derived slug."""
        gone = set(slugs)
        entries = self.decay_ledger(scope_hash)
        if gone.isdisjoint(entries):
            return
        kept = [(slug, e) for slug, e in entries.items() if slug not in gone]
        atomic_write(self.decay_ledger_path(scope_hash), _ledger_text(kept))

    def find(self, slug: str) -> Path | None:
        """Locate a memory file by slug without the index (used when the index is suspect)."""
        if not self.scopes_dir.is_dir():
            return None
        for scope in self.scopes_dir.iterdir():
            for sub in (*_TYPE_DIRS, FORGOTTEN_DIR):
                for suffix in (".md", ENCRYPTED_SUFFIX):
                    candidate = scope / sub / f"{slug}{suffix}"
                    if candidate.is_file():
                        return candidate
        return None

    def remove(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
            fsync_dir(path.parent)
        except OSError as exc:
            raise storage_error(exc, path, "removing") from exc

    def remove_many(self, paths: Iterable[Path]) -> None:
        """Remove many files, then sync each directory once (a bulk move's cleanup). Unlink
        is syscall-bound and releases the GIL: a few threads share the work."""
        todo = list(paths)

        def unlink(path: Path) -> None:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise storage_error(exc, path, "removing") from exc

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(unlink, todo))
        folders = {path.parent for path in todo}
        for folder in sorted(folders):
            try:
                fsync_dir(folder)
            except OSError as exc:
                raise storage_error(exc, folder, "syncing") from exc

    def iter_files(self, *, encrypted: bool = False) -> Iterator[Path]:
        """Every plaintext memory file (and with `encrypted` every `.md.enc` one too), in a
        stable order."""
        if not self.scopes_dir.is_dir():
            return
        for scope in sorted(p for p in self.scopes_dir.iterdir() if p.is_dir()):
            for sub in sorted((*_TYPE_DIRS, FORGOTTEN_DIR)):
                folder = scope / sub
                if folder.is_dir():
                    yield from sorted(
                        p
                        for p in folder.iterdir()
                        if not p.name.startswith(".")
                        and (p.suffix == ".md" or (encrypted and p.name.endswith(ENCRYPTED_SUFFIX)))
                    )

    def iter_encrypted(self) -> Iterator[Path]:
        """Every `.md.enc` memory file (what `doctor` checks the headers of)."""
        return (p for p in self.iter_files(encrypted=True) if p.name.endswith(ENCRYPTED_SUFFIX))

    def has_memories(self) -> bool:
        """Whether any memory file (plain or encrypted) is here; stops at the first."""
        if not self.scopes_dir.is_dir():
            return False
        for scope in self.scopes_dir.iterdir():
            for sub in (*_TYPE_DIRS, FORGOTTEN_DIR):
                folder = scope / sub
                if folder.is_dir() and any(
                    p.name.endswith((".md", ENCRYPTED_SUFFIX)) and not p.name.startswith(".")
                    for p in folder.iterdir()
                ):
                    return True
        return False

    def count_encrypted(self) -> int:
        if not self.scopes_dir.is_dir():
            return 0
        return sum(1 for _ in self.scopes_dir.glob(f"*/*/*{ENCRYPTED_SUFFIX}"))

    def sync_all(self) -> None:
        """Flush every pending write: the end of a bulk write that skipped per-file fsync."""
        sync_filesystem(self.home)
