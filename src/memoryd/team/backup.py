"""`memoryd team backup FILE` and `memoryd team restore FILE`: the team's data dir in one
archive, and a new team server made from one.

The archive (tar.gz, 0600) holds what cannot be made again: the vault (`scopes/`), the audit
log, the journal, `team-projects/`, the databases (`team.db`, `governance.db`, copied with
SQLite's backup API), `team.key`, the TLS pair and `team.toml`, and `backup.json`: when it was
taken and the graph at that moment (its write sequence number, its memories' count and a
digest of their slugs). The graph and the search index are derived from the vault, so a
restore rebuilds them (`reindex`, on the FalkorDB graph the restore names) instead of carrying
a copy that could disagree with it, and checks the rebuilt graph against `backup.json`.

`take` snapshots one moment (hard links, mostly: see there) in a directory of the data dir:
the caller holds every write back while it runs. A running team server does it on its writer
thread, behind its write barrier (`POST /v1/team/backup` on its admin socket,
`team_server/admin.py`), and packs after letting writes go again; with no server running,
`backup` takes the data dir's lock instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.errors import ConfigError, GraphLocked, InvalidInput, StorageError
from memoryd.locking import HomeLock
from memoryd.scope import scope_hash_of_path
from memoryd.team.config import PROJECTS_DIR, TEAM_FILE, load_team, toml_string

KEPT = ("scopes", "audit", "journal", "team-projects", "tls", "team.key", "team.toml")
COPIED = ("journal", "tls", "team.key", "team.toml")
"""Copied whole into the snapshot (small; the journal is emptied in place); the rest linked."""
DATABASES = ("team.db", "governance.db")
PATHS = ("cert", "key", "database", "secret")
"""The team.toml settings that name files in the data dir: rewritten to the new one."""
MANIFEST = "backup.json"
_COMMITS = "MATCH (m:Meta {key: 'commits'}) RETURN m.value"
_SLUGS = "MATCH (m:Memory) RETURN m.slug"


def check_out(out: Path) -> Path:
    """The archive's path, absolute: a new file in an existing directory."""
    out = out.expanduser().absolute()
    if out.exists():
        raise InvalidInput(f"{out} exists", hint="pass a new file name")
    if not out.parent.is_dir():
        raise InvalidInput(f"no directory {out.parent}", hint="create it, or write elsewhere")
    return out


@dataclass
class Snapshot:
    """The data dir at one moment, in `staging`, ready to pack."""

    staging: Path
    sizes: dict[str, int]
    """Each hard-linked file's size at the moment (what is packed of it), by archive name."""
    manifest: dict[str, Any]


def backup(home: Path, out: Path) -> int:
    """Write the archive of `home` (no team server running on it) to `out`; how many files
    it holds."""
    load_team(home)  # a team data dir, or a clear error
    out = check_out(out)
    lock = HomeLock(home, timeout_s=0.5)
    try:
        lock.acquire()
    except GraphLocked as exc:
        raise GraphLocked(
            f"the team server runs on {home} but its admin socket did not answer",
            hint="wait until it answers (`memoryd team status`), or stop it and back up",
        ) from exc
    staging = staging_dir(home)
    try:
        try:
            snapshot = take(home, staging, None)
        finally:
            lock.release()
        return archive(snapshot, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def staging_dir(home: Path) -> Path:
    """A private directory in the data dir for the snapshot (on its file system, so files
    can be hard-linked), removed once it is packed."""
    try:
        return Path(tempfile.mkdtemp(prefix=".backup-", dir=home))
    except OSError as exc:
        raise StorageError(f"cannot write in {home}: {exc.strerror}") from exc


def take(home: Path, staging: Path, graph: Any | None) -> Snapshot:
    """The data dir at this moment in `staging`, with `backup.json` describing `graph` (the
    live graph store, None when none is open). Every write must be held back while it runs:
    this is the one moment the archive shows. Cheap, so writes wait little: the vault and the
    audit log are hard-linked (a memory file is replaced whole, never rewritten in place; the
    audit log and the decay ledgers are only appended to, so their size now bounds what is
    packed of them); the journal (emptied in place), keys and settings are copied, and the
    databases through SQLite's backup API."""
    started = time.monotonic()
    sizes: dict[str, int] = {}
    try:
        for name in KEPT:
            source = home / name
            if name in COPIED and source.is_dir():
                shutil.copytree(source, staging / name, symlinks=True)
            elif name in COPIED and source.exists():
                shutil.copy2(source, staging / name)
            elif source.exists():
                _link_tree(source, staging, home, sizes)
        for name in DATABASES:
            if (home / name).exists():
                _snapshot(home / name, staging / name)
    except (OSError, shutil.Error, sqlite3.Error) as exc:
        raise StorageError(f"cannot copy {home} for a backup: {exc}") from exc
    manifest: dict[str, Any] = {
        "format": 1,
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "graph": None if graph is None else graph_state(graph),
    }
    manifest["copy_ms"] = round((time.monotonic() - started) * 1000, 1)
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return Snapshot(staging, sizes, manifest)


def _link_tree(source: Path, staging: Path, home: Path, sizes: dict[str, int]) -> None:
    """Hard links in `staging` to the files under `source` (a copy where the file system
    refuses a link), each one's size now kept in `sizes`."""
    for top, dirs, files in os.walk(source):
        rel = Path(top).relative_to(home)
        (staging / rel).mkdir(mode=0o700, exist_ok=True)
        dirs.sort()
        for name in sorted(files):
            target = staging / rel / name
            try:
                os.link(Path(top) / name, target)
            except OSError:
                shutil.copy2(Path(top) / name, target)
            sizes[(rel / name).as_posix()] = target.stat().st_size


def graph_state(graph: Any) -> dict[str, Any]:
    """The graph's write sequence number, and its memories' count and slugs' digest."""
    found = graph.cypher(_COMMITS).rows
    slugs = [str(row[0]) for row in graph.cypher(_SLUGS, limit=1 << 40).rows]
    return {
        "commits": int(found[0][0]) if found else 0,
        "memories": len(slugs),
        "slugs_sha256": slugs_digest(slugs),
    }


def slugs_digest(slugs: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(slugs)).encode("utf-8")).hexdigest()


def archive(snapshot: Snapshot, out: Path) -> int:
    """Pack the snapshot into the new file `out` (0600, tar.gz); how many files it holds."""
    count = 0
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for path in sorted(snapshot.staging.rglob("*")):
                name = path.relative_to(snapshot.staging).as_posix()
                info = tar.gettarinfo(path, arcname=name)
                if not path.is_file():
                    tar.addfile(info)
                    continue
                size = snapshot.sizes.get(name)
                if size is not None and info.size < size:
                    raise StorageError(f"{name} shrank while the backup was packed")
                info.size = info.size if size is None else size
                with path.open("rb") as data:
                    tar.addfile(info, data)
                count += 1
    except (OSError, StorageError) as exc:
        out.unlink(missing_ok=True)
        raise StorageError(f"cannot write {out}: {exc}") from exc
    return count


def _snapshot(path: Path, copy: Path) -> None:
    """A consistent copy of an SQLite database (its WAL included)."""
    source, target = sqlite3.connect(path), sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    os.chmod(copy, 0o600)


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
    lines = ["[team]"] + [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _rehome_projects(home, old)
    for sub in (home, *(p for p in home.rglob("*") if p.is_dir())):
        os.chmod(sub, 0o700)
    for file in (p for p in home.rglob("*") if p.is_file()):
        os.chmod(file, 0o600)
    load_team(home)


def check_rebuilt(home: Path, graph: Any) -> str | None:
    """After a restore's reindex: what differs between the rebuilt graph and the graph the
    backup saw (None: the same memories; also None for a backup taken with no server, which
    saw no graph)."""
    try:
        manifest = json.loads((home / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None  # an archive of an earlier memoryd
    except (OSError, ValueError) as exc:
        return f"the backup's {MANIFEST} is unreadable: {exc}"
    seen = manifest.get("graph")
    if not seen:
        return None
    now = graph_state(graph)
    if (now["memories"], now["slugs_sha256"]) == (seen["memories"], seen["slugs_sha256"]):
        return None
    return (
        f"the rebuilt graph holds {now['memories']} memories, the server's graph held"
        f" {seen['memories']} (other slugs) when the backup was taken"
    )


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return toml_string(str(value))


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
