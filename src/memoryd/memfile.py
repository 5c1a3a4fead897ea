"""The session memory file: its scope, its slug, and its text in the vault's exact format.

The vault (`memoryd.vault`) is the reference for the file format; it is not imported here
because it builds the pydantic models (see the package docstring). What is written here is
checked by tests to parse with `vault.parse` into a valid `Frontmatter` and to render back
byte for byte with `vault.render`.

Re-capturing a session rewrites only the fields capture owns (title, times, tags, triggers,
`session_id`, `agent`, `model`) and the body. Every other frontmatter line — recall counts,
decay state, relations written by extraction, keys added by hand — is kept as it was, and
tags or triggers added by hand are kept beside the derived ones. The body's `## Summary`
section, which the daemon's enrichment worker writes at its top (an LLM summary), is kept
too: capture owns the rest of the body, the worker owns that section.

The hook and the daemon both read-modify-write these files, outside each other's process:
each takes `memory_lock` around its read-modify-write, so neither loses what the other wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from memoryd.filelock import lock, try_lock, unlock
from memoryd.private import make_private_dir

SCOPES_DIR = "scopes"
SESSIONS_DIR = "sessions"
FORGOTTEN_DIR = "forgotten"
ENCRYPTED_SUFFIX = ".md.enc"
SESSION_TTL_DAYS = 90
"""`MemoryType.SESSION.default_ttl_days`; a test keeps the two equal."""

# The declared Frontmatter fields in model order (vault renders them in this order, then extras).
DECLARED = (
    "title",
    "slug",
    "type",
    "scope_hash",
    "source",
    "created_at",
    "updated_at",
    "tags",
    "triggers",
    "category",
    "ttl_days",
    "decay_state",
    "recall_count",
    "last_recalled_at",
    "dura_score",
    "promoted_from",
    "supersedes",
    "supersede_decisions",
    "observations",
)
KEPT_WHEN_PRESENT = frozenset({"created_at", "ttl_days", "decay_state", "recall_count"})
MERGED_LISTS = frozenset({"tags", "triggers"})

LOCKS_DIR = "locks"
LOCK_STRIPES = 64
"""Memory-file locks are striped over this many files, so `locks/` never needs pruning."""
SUMMARY_HEADING = "## Summary"
SUMMARY_END = "<!-- end of summary -->"
"""The line that closes the summary section; it renders as nothing in markdown viewers."""

_YAML_WORDS = {"yes", "no", "on", "off", "true", "false", "null", "y", "n"}
_KEY_LINE = re.compile(r"^([A-Za-z_][\w.-]*)[ \t]*:(?:[ \t]|$)")
_SLUG_UNSAFE = re.compile(r"[^0-9A-Za-z._-]+")


class ScopeRef(NamedTuple):
    """A scope as capture knows it; the full `ScopeInfo` is made when the inbox is drained."""

    scope_hash: str
    path: str
    git_toplevel: str | None = None


def hash_path(path: str) -> str:
    """`scope.hash_path`: the first 12 hex of sha256 of the scope's root path."""
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:12]


SCOPE_PATH_HEADER = "X-Memoryd-Scope-Path"
"""The scope's root path beside a request that names the scope by its hash (inject, the CLI's
recall): a daemon in a team tells a shared project by its git remote, which a hash alone
does not carry (`team_member.forward`). Percent-encoded: a header is latin-1."""


def scope_path_header(path: str) -> str:
    return urllib.parse.quote(path, safe="/")


def path_of_header(value: bytes, scope_hash: str) -> str | None:
    """The scope root a `SCOPE_PATH_HEADER` names, if it is the one `scope_hash` is of."""
    path = urllib.parse.unquote(value.decode("latin-1"))
    return path if os.path.isabs(path) and hash_path(path) == scope_hash else None


def git_toplevel(directory: Path) -> str | None:
    for candidate in (directory, *directory.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return None


def scope_of(cwd: str | None) -> ScopeRef:
    """The scope of a session's directory: its git toplevel, else itself (as `scope.resolve_scope`).

    A directory that does not exist here (a payload from another machine) is hashed as given.
    """
    directory = Path(cwd or os.getcwd()).expanduser()
    try:
        resolved = directory.resolve(strict=True)
    except (OSError, RuntimeError):
        root = os.path.normpath(os.path.abspath(directory))
        return ScopeRef(hash_path(root), root)
    if not resolved.is_dir():
        resolved = resolved.parent
    toplevel = git_toplevel(resolved)
    root = toplevel or str(resolved)
    return ScopeRef(hash_path(root), root, toplevel)


def scope_for_files(paths: Iterable[str]) -> str | None:
    """A directory to scope by when the agent gives no cwd: the git toplevel of a touched file."""
    for path in paths:
        candidate = Path(path).expanduser()
        if candidate.is_absolute() and candidate.parent.is_dir():
            return git_toplevel(candidate.parent) or str(candidate.parent)
    return None


def scope_file(home: Path, scope_hash: str) -> Path:
    return home / SCOPES_DIR / scope_hash / "scope.json"


def scope_is_sensitive(home: Path, scope_hash: str) -> bool:
    try:
        data = json.loads(scope_file(home, scope_hash).read_bytes())
    except (OSError, ValueError):
        return False
    return bool(isinstance(data, dict) and data.get("sensitive"))


def scope_json(scope: ScopeRef) -> bytes:
    """`scope.json` as `Vault.write_scope` writes a `ScopeInfo` without a git remote."""
    data: dict[str, Any] = {
        "scope_hash": scope.scope_hash,
        "path": scope.path,
        "git_toplevel": scope.git_toplevel,
        "git_remote": None,
        "aliases": [],
        "sensitive": False,
    }
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def session_slug(agent: str, session_id: str) -> str:
    """`session-<agent>-<session id>`: stable, so a re-capture finds the same file."""
    safe = _SLUG_UNSAFE.sub("-", session_id).strip("-._")[:64]
    slug = f"session-{agent}-{safe}" if safe else f"session-{agent}"
    if safe != session_id:
        slug += "-" + hashlib.sha1(session_id.encode("utf-8")).hexdigest()[:8]
    return slug


def sealed_session_slug(public_key: bytes, agent: str, session_id: str) -> str:
    """A sensitive scope's session slug: stable across the session's captures (so they
    update one memory) but opaque: a hash under the scope's public key, not the session id."""
    digest = hashlib.sha256(b"\0".join((public_key, agent.encode(), session_id.encode())))
    return f"session-s-{digest.hexdigest()[:16]}"


def find_session_file(home: Path, slug: str) -> Path | None:
    """The file of this session in any scope (a session may move scopes when its cwd changes)."""
    scopes = home / SCOPES_DIR
    try:
        entries = list(os.scandir(scopes))
    except OSError:
        return None
    for entry in entries:
        for sub in (SESSIONS_DIR, FORGOTTEN_DIR):
            for suffix in (".md", ENCRYPTED_SUFFIX):
                candidate = Path(entry.path) / sub / f"{slug}{suffix}"
                if candidate.is_file():
                    return candidate
    return None


def format_ts(value: datetime) -> str:
    """As `models.format_ts` of a second-precision UTC time."""
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _plain(text: str) -> bool:
    """`vault._PLAIN` without compiling its large Unicode class (milliseconds on every hook).

    `\\w` is `str.isalnum()` or `_`; unlike the regex's `$`, a trailing newline is not plain.
    """
    if not text:
        return False
    first = text[0]
    if not (first.isascii() and (first.isalpha() or first in "_/")) and not (
        "\u00c0" <= first <= "\uffff"
    ):
        return False
    return all(ch.isalnum() or ch in "_ ./()+-" or "\u00c0" <= ch <= "\uffff" for ch in text[1:])


def scalar(value: Any) -> str:
    """One YAML scalar, exactly as `vault._scalar` writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if (
        _plain(text)
        and not text.endswith(" ")
        and " #" not in text
        and text.lower() not in _YAML_WORDS
    ):
        return text
    return json.dumps(text, ensure_ascii=False)


def _line(key: str, value: Any) -> str:
    if isinstance(value, list):
        return f"{key}: [{', '.join(scalar(v) for v in value)}]"
    return f"{key}: {scalar(value)}"


Block = tuple[str | None, list[str]]


def frontmatter_blocks(text: str) -> tuple[list[Block], str] | None:
    """A memory file split into top-level frontmatter blocks (key, lines) and its body."""
    if not text.startswith("---"):
        return None
    lines = text.split("\n")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if end is None:
        return None
    blocks: list[Block] = []
    for line in lines[1:end]:
        match = _KEY_LINE.match(line)
        if match:
            blocks.append((match.group(1), [line]))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            blocks.append((None, [line]))
    body = "\n".join(lines[end + 1 :])
    return blocks, body


def parse_list(lines: list[str]) -> list[str]:
    """The items of a `key: [a, "b c"]` or block-style list; [] when it is anything else."""
    value = lines[0].split(":", 1)[1].strip()
    items: list[str] = []
    if value.startswith("[") and value.endswith("]"):
        for match in re.finditer(r'\s*("(?:[^"\\]|\\.)*"|[^,\]]+?)\s*(?:,|$)', value[1:-1]):
            token = match.group(1)
            try:
                items.append(json.loads(token) if token.startswith('"') else token)
            except ValueError:
                return []
        return [i for i in items if isinstance(i, str) and i]
    if not value:
        for line in lines[1:]:
            item = line.strip()
            if item.startswith("- "):
                items.append(item[2:].strip().strip('"'))
    return items


def compose(existing: str | None, fields: dict[str, Any], body: str) -> str:
    """The file text: `fields` (capture's own) over what `existing` holds; then the body,
    under the summary section `existing` had (the enrichment worker's, kept until it writes a
    newer one)."""
    split = frontmatter_blocks(existing) if existing else None
    if split is not None:
        kept = split_summary(split[1].removeprefix("\n"))[0]
        if kept:
            body = with_summary(kept, body)
    blocks = dict((key, lines) for key, lines in split[0] if key) if split else {}
    preamble = [line for key, lines in (split[0] if split else []) if key is None for line in lines]
    out: list[str] = list(preamble)
    for key in DECLARED:
        if key in blocks and (key in KEPT_WHEN_PRESENT or key not in fields):
            out.extend(blocks[key])
        elif key in fields and key in MERGED_LISTS and key in blocks:
            merged = list(dict.fromkeys([*fields[key], *parse_list(blocks[key])]))
            out.append(_line(key, merged))
        elif key in fields and fields[key] not in (None, []):
            out.append(_line(key, fields[key]))
    extras = [key for key in blocks if key not in DECLARED and key != "relations"]
    extras += [key for key in fields if key not in DECLARED and key not in blocks]
    for key in extras:
        if key in fields:
            if fields[key] not in (None, [], ""):
                out.append(_line(key, fields[key]))
        else:
            out.extend(blocks[key])
    if "relations" in blocks:
        out.extend(blocks["relations"])
    return "---\n" + "\n".join(out) + "\n---\n\n" + body + "\n"


def split_summary(body: str) -> tuple[str, str]:
    """(the `## Summary` section the enrichment worker wrote at the top, the rest of the body).

    The section is recognised only at the very top and only when closed by `SUMMARY_END`, so a
    captured body (which starts with its header line) is never mistaken for one.
    """
    if not body.startswith(SUMMARY_HEADING + "\n"):
        return "", body
    end = body.find("\n" + SUMMARY_END)
    if end == -1:
        return "", body
    cut = end + 1 + len(SUMMARY_END)
    if cut < len(body) and body[cut] != "\n":
        return "", body
    return body[:cut], body[cut:].lstrip("\n")


def with_summary(section: str, body: str) -> str:
    """`body` with `section` (a rendered summary, or "" for none) in place of its own."""
    rest = split_summary(body)[1]
    return f"{section}\n\n{rest}" if section else rest


def render_summary(summary: str, decisions: Iterable[str], open_problems: Iterable[str]) -> str:
    """The summary section: a paragraph, then decisions and open problems as bullets.

    Every item is put on one line and markdown headings or comments are defused, so model
    output cannot end the section early or add one capture would mistake for its own.
    """

    def flat(text: str) -> str:
        return " ".join(text.replace("<!--", "<!‐‐").split()).lstrip("#").strip()

    lines = [SUMMARY_HEADING, flat(summary)]
    for heading, items in (("Decisions", decisions), ("Open problems", open_problems)):
        kept = [flat(item) for item in items if flat(item)]
        if kept:
            lines += ["", f"**{heading}**", *(f"- {item}" for item in kept)]
    return "\n".join([*lines, SUMMARY_END])


def lock_stripe(slug: str) -> int:
    """Which of the `LOCK_STRIPES` lock files guards `slug`'s memory file: a bulk rewrite
    takes each stripe once for all its files instead of once per file."""
    return int(hashlib.sha1(slug.encode("utf-8")).hexdigest()[:8], 16) % LOCK_STRIPES


def lock_file(home: Path, slug: str) -> Path:
    """The lock file of `slug`'s stripe (`memory_lock` holds it with flock)."""
    return home / LOCKS_DIR / f"memory-{lock_stripe(slug):02d}.lock"


@contextlib.contextmanager
def memory_lock(home: Path, slug: str, *, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the lock of one memory file around a read-modify-write of it.

    The hook (re-capture) and the daemon (enrichment, recall counts) both rewrite session
    files; flock on a sidecar file serialises them across processes and threads. Locks are
    striped by slug (`LOCK_STRIPES` files): two memories rarely share one, and only for the
    milliseconds of a write. Without `timeout_s` it blocks (the hook's SIGALRM budget bounds
    the wait); with it, `TimeoutError` is raised when the lock stays taken that long.
    """
    path = lock_file(home, slug)
    make_private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if timeout_s is None:
            lock(fd)
        else:
            deadline = time.monotonic() + timeout_s
            while not try_lock(fd):
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"the memory file of {slug} stayed locked for {timeout_s:g} s"
                    )
                time.sleep(0.005)
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)


def same_content(old: str, new: str) -> bool:
    """Equal but for `updated_at`: a re-capture that changed nothing is not rewritten."""

    def strip(text: str) -> list[str]:
        return [line for line in text.split("\n") if not line.startswith("updated_at:")]

    return strip(old) == strip(new)
