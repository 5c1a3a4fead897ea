"""Scopes: memories are bucketed per project, keyed by the first 12 hex of sha256(path).

The path is the git toplevel when there is one, else the directory itself (seeds/002). The
git remote is recorded as an alias so one project cloned on two machines can be recognised.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path, PurePath

from memoryd.errors import InvalidInput
from memoryd.models import ScopeInfo

SENSITIVE_MARKER = ".memoryd-sensitive"
"""The file `memoryd sensitive mark` writes at a scope root; every path below it is sensitive."""
PATH_MAX = 4096
NAME_MAX = 255
"""Linux's limits, in bytes, on a whole path and on one name in it."""


@functools.lru_cache(maxsize=256)
def path_problem(value: str) -> str | None:
    """Why no file system call can take `value` as a path (a NUL, a character with no file
    name encoding, a path or a name past the OS's limits), or None. Checked before any call:
    Python raises ValueError or UnicodeEncodeError for the first two, not OSError. Cached: a
    batch names the same few scope paths once per memory."""
    if "\x00" in value:
        return "contains a NUL character (\\x00), which no file path can hold"
    try:
        raw = os.fsencode(value)
    except UnicodeEncodeError as exc:
        return f"holds {value[exc.start]!r}, a character no file name can be encoded with"
    if len(raw) >= PATH_MAX:
        return f"is {len(raw):,} bytes long; a path is at most {PATH_MAX - 1:,}"
    longest = max((len(name) for name in raw.split(b"/")), default=0)
    if longest > NAME_MAX:
        return f"has a name of {longest} bytes; a file name is at most {NAME_MAX}"
    return None


def check_path(value: str | os.PathLike[str], field: str) -> str:
    """`value` as text, or InvalidInput naming `field` when it cannot be a path."""
    text = os.fspath(value)
    problem = path_problem(text)
    if problem is not None:
        raise InvalidInput(f"{field} {problem}", hint=f"pass {field} as a valid path")
    return text


def hash_path(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:12]


def _git(cwd: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = result.stdout.strip()
    return out if result.returncode == 0 and out else None


def _git_toplevel(directory: Path) -> str | None:
    """The git toplevel, found by walking up for `.git` (no subprocess: captures must be fast)."""
    for candidate in (directory, *directory.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return None


def marked_sensitive(directory: Path) -> bool:
    """Whether `directory` or any directory above it holds the sensitive marker (a stat per
    level, no subprocess: captures call this)."""
    return any(
        (candidate / SENSITIVE_MARKER).is_file() for candidate in (directory, *directory.parents)
    )


def normalise_remote(remote: str) -> str:
    """`git@github.com:a/b.git` and `https://github.com/a/b` name the same project."""
    remote = remote.strip()
    if remote.endswith(".git"):
        remote = remote[:-4]
    if "://" in remote:
        remote = remote.split("://", 1)[1]
        remote = remote.split("@", 1)[-1]
    elif "@" in remote and ":" in remote:
        user_host, _, path = remote.partition(":")
        remote = f"{user_host.split('@', 1)[-1]}/{path}"
    return remote.rstrip("/").lower()


def project_names(info: ScopeInfo) -> list[str]:
    """The names a project goes by: its directory's and its remote repository's
    (`~/src/shop-api` with remote `github.com/acme/shop.git` → shop-api, shop)."""
    names = [PurePath(info.path).name]
    for alias in info.aliases:
        if alias.startswith("remote:"):
            names.append(alias.rstrip("/").rsplit("/", 1)[-1])
    return [name for name in dict.fromkeys(names) if name]


def scope_hash_of_path(path: Path | str | None = None) -> str:
    """The hash of the scope `path` belongs to: `resolve_scope(path).scope_hash`, without the
    marker and remote lookups (every recall and search given a path names its scope so)."""
    directory, toplevel = _scope_directory(path)
    return hash_path(toplevel or str(directory))


def resolve_scope(path: Path | str | None = None, *, with_remote: bool = True) -> ScopeInfo:
    """The scope of `path` (default: the current directory)."""
    directory, toplevel = _scope_directory(path)
    root = toplevel or str(directory)
    remote = (
        _git(Path(root), "config", "--get", "remote.origin.url")
        if toplevel and with_remote
        else None
    )
    aliases = [f"remote:{normalise_remote(remote)}"] if remote else []
    return ScopeInfo(
        scope_hash=hash_path(root),
        path=root,
        git_toplevel=toplevel,
        git_remote=remote,
        aliases=aliases,
        sensitive=marked_sensitive(directory),
    )


def _scope_directory(path: Path | str | None) -> tuple[Path, str | None]:
    """`path` (default: the current directory) resolved, and its git toplevel if any."""
    if path is not None:
        check_path(path, "scope")
    directory = Path(path if path is not None else Path.cwd()).expanduser()
    try:
        directory = directory.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise InvalidInput(
            f"scope path {directory} does not exist", hint="pass an existing directory with --scope"
        ) from exc
    if not directory.is_dir():
        raise InvalidInput(
            f"scope path {directory} is not a directory", hint="pass the project directory"
        )
    return directory, _git_toplevel(directory)
