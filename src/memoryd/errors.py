"""The one error tree of memoryd.

Every surface (CLI exit code, HTTP status, MCP tool error) translates these once, so a
store never raises a surface's error type and a surface never sees an engine's exception.

    MemorydError
    ├── NotFound                 a memory, entity or file that should exist does not
    ├── Conflict                 the write would collide with what is stored (duplicate body, slug)
    ├── InvalidInput             the caller's input is wrong (unknown type, empty title, bad UTF-8)
    │   └── BrokenMemoryFile     a vault file that cannot be parsed (edited by hand)
    │       └── EncryptedFileBroken  a `.md.enc` file fails its header or authentication
    ├── PolicyDenied             governance said no (sensitive scope without a grant, write Cypher)
    │   ├── QueryLimitExceeded   a graph query needed more memory, time or result than it may use
    │   └── TeamDenied           a team server's gate refused a request
    │       ├── TokenRefused     no user behind the token (unknown, revoked, expired)
    │       ├── ScopeNotGranted  the user has no role, or too low a one, in the project
    │       └── NotForTeam       the route is not open to team users
    ├── ExtractionFailed         the NLP or LLM stage failed
    │   └── RateLimited
    ├── StorageError             the disk, the graph or the index failed
    │   ├── GraphLocked          another process owns the graph
    │   ├── ResourceExhausted    the buffer pool or the disk is full
    │   └── AuditChainBroken     the audit log does not verify
    └── ConfigError              the config file or an environment variable is wrong
        ├── MissingExtra         a feature whose optional extra is not installed
        ├── MissingKey           a sensitive scope's key is not on this machine (or wrong)
        └── KeyringUnavailable   no usable OS keyring to keep a scope key in
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class MemorydError(Exception):
    """Base of every error memoryd raises on purpose.

    `code` is stable and documented; `hint` says what the user can do about it.
    """

    code = "memoryd_error"
    default_hint = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint

    def __str__(self) -> str:
        return self.message


class NotFound(MemorydError):
    code = "not_found"


class Conflict(MemorydError):
    code = "conflict"


class InvalidInput(MemorydError):
    code = "invalid_input"


class BrokenMemoryFile(InvalidInput):
    code = "broken_memory_file"
    default_hint = (
        "fix the file by hand (it is plain markdown with YAML frontmatter) or move it away"
    )


class PolicyDenied(MemorydError):
    code = "policy_denied"


class QueryLimitExceeded(PolicyDenied):
    """A user's graph query was stopped at one of its limits (memory, time, result size).

    `limit` says which: "memory", "time" or "result" ("" when rebuilt from a daemon's answer)."""

    code = "query_limit"

    def __init__(self, message: str, *, hint: str | None = None, limit: str = "") -> None:
        super().__init__(message, hint=hint)
        self.limit = limit


class TeamDenied(PolicyDenied):
    """A team request the gate refused (HTTP 403)."""

    code = "team_denied"


class TokenRefused(TeamDenied):
    """No user behind the token: unknown, revoked or expired (HTTP 401)."""

    code = "token_refused"


class ScopeNotGranted(TeamDenied):
    """The user has no role in the project, or too low a one."""

    code = "scope_not_granted"


class NotForTeam(TeamDenied):
    """The route is not open to team users yet."""

    code = "not_for_team"


class ExtractionFailed(MemorydError):
    code = "extraction_failed"


class RateLimited(ExtractionFailed):
    code = "rate_limited"


class StorageError(MemorydError):
    code = "storage_error"


class GraphLocked(StorageError):
    code = "graph_locked"
    default_hint = "use `memoryd serve`, or wait for the other command to finish"


class ResourceExhausted(StorageError):
    code = "resource_exhausted"


class AuditChainBroken(StorageError):
    code = "audit_chain_broken"
    default_hint = "the audit log was changed outside memoryd; restore it from a backup"


class ConfigError(MemorydError):
    code = "config_error"


class MissingExtra(ConfigError):
    """A feature asked for whose packages are an optional extra (pyproject.toml) not installed
    here: the base install holds only what the default product needs."""

    code = "missing_extra"

    def __init__(self, feature: str, extra: str, missing: str) -> None:
        super().__init__(
            f"{feature} needs the `{extra}` extra ({missing} is not installed):"
            f" pip install 'memoryd[{extra}]'",
            hint=f"uv tool install 'memoryd[{extra}]' if memoryd came from uv",
        )
        self.extra = extra


class EncryptedFileBroken(BrokenMemoryFile):
    """A flipped byte, a truncated file, or a file moved to another scope or slug."""

    code = "encrypted_file_broken"
    default_hint = "restore the file from a backup (it cannot be repaired without its tag)"


class MissingKey(ConfigError):
    """The key a sensitive scope's files were sealed with is not available here."""

    code = "missing_key"
    default_hint = (
        "import the key on this machine with `memoryd sensitive import-key PATH FILE` "
        "(made by `memoryd sensitive export-key`); the encrypted files were not touched"
    )


class KeyringUnavailable(ConfigError):
    code = "keyring_unavailable"
    default_hint = (
        "use `memoryd sensitive mark PATH --passphrase` to derive the key from a passphrase instead"
    )


def describe_validation(errors: Iterable[Mapping[str, Any]]) -> str:
    """Pydantic's errors as one line a user can act on: `title: at most 500 characters (got
    600)`, never the multi-line dump with its documentation URL."""
    problems = []
    for err in errors:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "value"
        kind, ctx, value = err.get("type", ""), err.get("ctx") or {}, err.get("input")
        size = len(value) if isinstance(value, str | list | dict) else None
        got = f" (got {size})" if size is not None else ""
        if kind == "string_too_long":
            problem = f"at most {ctx.get('max_length')} characters{got}"
        elif kind == "string_too_short":
            problem = (
                "must not be empty"
                if ctx.get("min_length") == 1
                else (f"at least {ctx.get('min_length')} characters{got}")
            )
        elif kind == "too_long":
            problem = f"at most {ctx.get('max_length')} items{got}"
        elif kind == "string_unicode":
            problem = "is not UTF-8 text (re-encode it as UTF-8)"
        else:
            problem = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        problems.append(f"{where}: {problem}")
    return "; ".join(problems) or "invalid value"
