"""The client's side of the wire: errors rebuilt from the daemon's `code`, scope hashes, and
the query and path arguments as the daemon must see them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from memoryd.errors import MemorydError, StorageError
from memoryd.scope import resolve_scope

if TYPE_CHECKING:
    import httpx

JSON_HEADERS = {"Content-Type": "application/json"}
PROBE_TIMEOUT_S = 3.0
"""How long a socket probe, a connect and the first health request wait for the daemon."""

_SCOPE_HASH = re.compile(r"[0-9a-f]{12}")


def unix_socket_transport(socket: Path) -> httpx.HTTPTransport:
    """An HTTP transport over a memoryd Unix socket (the daemon's, the team server's admin
    socket). Plain HTTP only, so it gets an SSL context with no CA loaded, which fails any
    TLS on it, in place of httpx's default one, which reads the whole CA bundle for every
    client made: CPU every CLI command a daemon answers paid for nothing."""
    import ssl

    import httpx

    return httpx.HTTPTransport(uds=str(socket), verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))


def _error_classes() -> dict[str, type[MemorydError]]:
    found: dict[str, type[MemorydError]] = {MemorydError.code: MemorydError}
    pending: list[type[MemorydError]] = [MemorydError]
    while pending:
        for sub in pending.pop().__subclasses__():
            found.setdefault(sub.code, sub)
            pending.append(sub)
    return found


def error_from_response(response: httpx.Response) -> MemorydError:
    """The MemorydError the daemon raised, rebuilt from `{"error": {"code", "message", "hint"}}`."""
    try:
        detail = response.json()["error"]
        code, message, hint = str(detail["code"]), str(detail["message"]), detail.get("hint")
    except (ValueError, KeyError, TypeError):
        return StorageError(
            f"the daemon answered HTTP {response.status_code} without an error body",
            hint="see <home>/logs/daemon.log",
        )
    cls = _error_classes().get(code, MemorydError)
    return cls(message, hint=str(hint) if hint is not None else None)


def scope_hash_of(scope: Path | str | None) -> str | None:
    """MemoryService.scope_hash_of, computed here: a relative path is the caller's."""
    return scope_and_path(scope)[0]


def scope_and_path(scope: Path | str | None) -> tuple[str | None, str | None]:
    """The scope's hash, and its root path when `scope` is a path (not a hash)."""
    if scope is None:
        return None, None
    text = str(scope)
    if _SCOPE_HASH.fullmatch(text) and not Path(text).exists():
        return text, None
    info = resolve_scope(scope, with_remote=False)
    return info.scope_hash, info.path


def _scope_arg(path: Path | str) -> str:
    """A scope for the daemon: an existing directory as its absolute path, else as given (a
    scope hash the daemon's vault knows)."""
    candidate = Path(path).expanduser()
    return str(candidate.resolve()) if candidate.is_dir() else str(path)


def _map_scope(map_scope: Mapping[str, str] | None) -> dict[str, str]:
    """`--map-scope` targets given as paths are the caller's: made absolute here."""
    out = {}
    for old, new in (map_scope or {}).items():
        is_hash = _SCOPE_HASH.fullmatch(new) and not Path(new).exists()
        out[old] = new if is_hash else str(Path(new).resolve())
    return out


def _entity(name_or_id: str) -> str:
    """An entity id, name or alias as a path segment (ids keep their colons readable)."""
    return quote(name_or_id, safe=":")


def _query(params: dict[str, Any]) -> dict[str, Any]:
    """Query parameters without the unset ones; enums as their values."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, list):
            out[key] = [getattr(v, "value", v) for v in value]
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = getattr(value, "value", value)
    return out


def _absolute(path: Path | str) -> str:
    """A path as the daemon (same machine, another working directory) must see it."""
    return str(Path(path).expanduser().absolute())


def _json(value: Any) -> bytes:
    """JSON as httpx sends it: compact, UTF-8, no NaN."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def batch_requests(
    key: str, bodies: Iterable[dict[str, Any]], extra: Mapping[str, Any], most: int, limit: int
) -> Iterator[bytes]:
    """The JSON of `{key: [bodies…], **extra}` requests of at most `most` bodies and about
    `limit` bytes each. Each body is encoded once: its text both measures the request and
    is its part (measuring with `json.dumps`, then letting httpx encode the batch again,
    cost an import's client a second a 32k-line file, while the daemon waited)."""
    head = b"{" + _json(key) + b":["
    tail = b"]" + (b"," + _json(dict(extra))[1:] if extra else b"}")
    batch: list[bytes] = []
    size = 0
    for body in bodies:
        part = _json(body)
        if batch and (len(batch) >= most or size + len(part) > limit):
            yield head + b",".join(batch) + tail
            batch, size = [], 0
        batch.append(part)
        size += len(part) + 1
    if batch:
        yield head + b",".join(batch) + tail
