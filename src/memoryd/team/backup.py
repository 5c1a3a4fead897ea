"""`memoryd team backup FILE` and `memoryd team restore FILE`: the team's data dir in one
archive, and a new team server made from one.

The archive (tar.gz, 0600) holds what cannot be made again: the vault (`scopes/`), the audit
log, the journal, `team-projects/`, the databases (`team.db`, `governance.db`, copied with
SQLite's backup API), `team.key`, the TLS pair and `team.toml`. The graph and the search index
are derived from the vault, so a restore rebuilds them (`reindex`, on the FalkorDB graph the
restore names) instead of carrying a copy that could disagree with it. A backup takes the data
dir's lock, so it is taken with the team server stopped: no write lands halfway through it.
"""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import tarfile
import tempfile
import tomllib
from pathlib import Path

from memoryd.errors import ConfigError, GraphLocked, InvalidInput, StorageError
from memoryd.locking import HomeLock
from memoryd.scope import scope_hash_of_path
from memoryd.team.config import PROJECTS_DIR, TEAM_FILE, load_team, toml_string

KEPT = ("scopes", "audit", "journal", "team-projects", "tls", "team.key", "team.toml")
DATABASES = ("team.db", "governance.db")
PATHS = ("cert", "key", "database", "secret")
"""The team.toml settings that name files in the data dir: rewritten to the new one."""


def backup(home: Path, out: Path) -> int:
    """Write the archive of `home` to `out`; how many files it holds."""
    load_team(home)  # a team data dir, or a clear error
    if out.exists():
        raise InvalidInput(f"{out} exists", hint="pass a new file name")
    lock = HomeLock(home, timeout_s=0.5)
    try:
        lock.acquire()
    except GraphLocked as exc:
        raise GraphLocked(
            f"the team server runs on {home}: a backup needs the data dir to itself",
            hint="stop it (SIGTERM), back up, start it again",
        ) from exc
    count = 0
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for name in KEPT:
                if (home / name).exists():
                    tar.add(home / name, arcname=name)
                    count += sum(1 for p in (home / name).rglob("*") if p.is_file()) or 1
            for name in DATABASES:
                if (home / name).exists():
                    data = _snapshot(home / name)
                    info = tarfile.TarInfo(name)
                    info.size, info.mode = len(data), 0o600
                    tar.addfile(info, io.BytesIO(data))
                    count += 1
    except OSError as exc:
        out.unlink(missing_ok=True)
        raise StorageError(f"cannot write {out}: {exc}") from exc
    finally:
        lock.release()
    return count


def _snapshot(path: Path) -> bytes:
    """A consistent copy of an SQLite database (its WAL included), as bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        source, target = sqlite3.connect(path), sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        return copy.read_bytes()


def restore(
    archive: Path,
    home: Path,
    *,
    port: int | None = None,
    falkordb_url: str | None = None,
    graph_name: str | None = None,
) -> None:
    """Unpack `archive` into the new data dir `home`, point team.toml's files (and, when
    given, the port, FalkorDB server and graph name) there. The caller rebuilds the graph."""
    if home.exists() and any(home.iterdir()):
        raise InvalidInput(f"{home} is not empty", hint="restore into a new data dir")
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            names = tar.getnames()
            if TEAM_FILE not in names:
                raise InvalidInput(f"{archive} is no team backup (no {TEAM_FILE})")
            home.mkdir(parents=True, exist_ok=True, mode=0o700)
            tar.extractall(home, filter="data")  # no absolute paths, links out or devices
    except (OSError, tarfile.TarError) as exc:
        raise InvalidInput(f"cannot read the backup {archive}: {exc}") from exc
    path = home / TEAM_FILE
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))["team"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise ConfigError(f"the backup's {TEAM_FILE} is unreadable: {exc}") from exc
    old = Path(str(table["database"])).parent
    for name in PATHS:  # the files the old data dir held move with it; others stay named
        if Path(str(table[name])).is_relative_to(old):
            table[name] = str(home / Path(str(table[name])).relative_to(old))
    if port is not None:
        table["port"] = port
    if falkordb_url is not None:
        table["falkordb_url"] = falkordb_url
    if graph_name is not None:
        table["graph_name"] = graph_name
    lines = ["[team]"] + [
        f"{key} = {value}" if isinstance(value, int) else f"{key} = {toml_string(str(value))}"
        for key, value in table.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _rehome_projects(home, old)
    for sub in (home, *(p for p in home.rglob("*") if p.is_dir())):
        os.chmod(sub, 0o700)
    for file in (p for p in home.rglob("*") if p.is_file()):
        os.chmod(file, 0o600)
    load_team(home)


def _rehome_projects(home: Path, old: Path) -> None:
    """A project's scope on the server is its directory under `team-projects/`, hashed by its
    path: in the new data dir each one has a new hash. Its vault directory, its `scope.json`
    and its memories' `scope_hash` move to it (the reindex then reads them there)."""
    for info_file in sorted((home / "scopes").glob("*/scope.json")):
        info = json.loads(info_file.read_text(encoding="utf-8"))
        was = Path(str(info.get("path", "")))
        if not was.is_relative_to(old / PROJECTS_DIR):
            continue
        path = home / was.relative_to(old)
        new_hash, old_hash = scope_hash_of_path(path), str(info["scope_hash"])
        info.update(scope_hash=new_hash, path=str(path), git_toplevel=str(path))
        info_file.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        line = re.compile(rf'^scope_hash: "?{old_hash}"?$', re.MULTILINE)  # quoted or not
        for memory in info_file.parent.rglob("*.md"):
            text = memory.read_text(encoding="utf-8")
            memory.write_text(line.sub(f'scope_hash: "{new_hash}"', text, count=1), "utf-8")
        info_file.parent.rename(home / "scopes" / new_hash)
