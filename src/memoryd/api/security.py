"""Who may talk to the daemon: local clients only, and on TCP only with the bearer token.

A web page the user visits can make their browser send requests to 127.0.0.1 under its own
host name (DNS rebinding), so every request must name localhost in its Host header. The Unix
socket is guarded by its file mode (0600), so it needs no token; TCP is reachable by every
local user, so it does.

A write (any method but GET and HEAD) that carries an `Origin` header must come from the
daemon's own origin (`http://` + its Host): a page elsewhere, on another port of localhost
too, cannot make the browser write, token or not (CSRF; the graph page edits memories).

The pages' files (`/`, `/docs` and the files under `static/`) are the one exception to the
token: a browser cannot add a header to a page it navigates to, and those files hold no data.
A page reads the token from its URL fragment (or the tab's sessionStorage) and sends it with
every API call, `/openapi.json` included. The Host check still applies to them.
"""

from __future__ import annotations

import hmac
import json
import logging
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memoryd.api.errors import error_body

logger = logging.getLogger(__name__)

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
# A memory body is at most 1,000,000 characters; JSON escaping can make that ~6 MB.
MAX_BODY_BYTES = 16 * 1024 * 1024
STATIC_DIR = Path(__file__).with_name("static")
PAGE_METHODS = frozenset({"GET", "HEAD"})
SOCKET_ONLY = ("/v1/sync/",)
"""Routes that name files on the daemon's machine (memories.json, conflict files): they are
served on the Unix socket only, so a TCP client cannot make the daemon read or write a path
it chooses. The CLI talks to the socket, so `memoryd sync` works unchanged."""


def host_allowed(host: str | None) -> bool:
    """`localhost`, `127.0.0.1` or `[::1]`, with or without a numeric port."""
    host = (host or "").lower()
    if host.startswith("["):  # an IPv6 literal: [::1] or [::1]:7423
        name, bracket, rest = host.partition("]")
        name += bracket
        port = rest.removeprefix(":") if rest.startswith(":") else None if rest else ""
    else:
        name, sep, port = host.partition(":")
        port = port if sep else ""
    if port is None or (port and not port.isdigit()):
        return False
    return name in LOCAL_HOSTS


def page_paths(static_dir: Path = STATIC_DIR) -> frozenset[str]:
    """The exact URL paths of the pages: `/`, `/docs` and each file under `static_dir`.

    Listed file by file, not by prefix, so nothing added to the app later under `/static`
    or next to it slips past the token by accident.
    """
    files = (p for p in static_dir.rglob("*") if p.is_file()) if static_dir.is_dir() else ()
    static = (f"/static/{p.relative_to(static_dir).as_posix()}" for p in files)
    return frozenset({"/", "/docs", *static})


class LocalOnly:
    """ASGI middleware: refuse foreign Host headers, and requests without the token if set
    (except GETs of the graph page's files, which carry no data)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None = None,
        public: frozenset[str] | None = None,
        refused: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self._token = token.encode() if token else None
        self._public = page_paths() if public is None else public
        self._refused = refused
        """Path prefixes this listener does not serve (TCP: `SOCKET_ONLY`)."""

    def _authorized(self, authorization: bytes | None) -> bool:
        """`Authorization: Bearer <token>`; the scheme is case-insensitive (RFC 9110 11.1)
        and may be followed by several spaces, the token is compared in constant time."""
        if self._token is None:
            return True
        scheme, _, credentials = (authorization or b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(
            credentials.lstrip(b" "), self._token
        )

    def _is_page(self, scope: Scope) -> bool:
        return (
            scope["type"] == "http"
            and scope.get("method") in PAGE_METHODS
            and scope.get("path") in self._public
        )

    async def _refuse_repeated(self, scope: Scope, send: Send, hosts: int, tokens: int) -> None:
        """400 for several Host headers (RFC 9112 3.2), 401 for several Authorization headers
        on TCP (with the bad one first, the good last one used to be taken)."""
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        elif hosts > 1:
            await _refuse(
                send,
                400,
                "invalid_input",
                f"{hosts} Host headers; send exactly one",
                "address the request to localhost once",
            )
        else:
            logger.warning("refused a request with %d Authorization headers", tokens)
            await _refuse(
                send,
                401,
                "unauthorized",
                f"{tokens} Authorization headers; send exactly one",
                "send one `Authorization: Bearer <token>`; `memoryd token` prints it",
                extra=[(b"www-authenticate", b"Bearer")],
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers") or []
        headers = dict(raw)
        hosts = sum(1 for name, _ in raw if name == b"host")
        tokens = sum(1 for name, _ in raw if name == b"authorization")
        if hosts > 1 or (tokens > 1 and self._token is not None):
            # `dict` keeps the last of each: a request must not be judged on one header and
            # served on another a proxy or a framework might read instead.
            await self._refuse_repeated(scope, send, hosts, tokens)
            return
        host = headers.get(b"host", b"").decode("latin-1")
        allowed = host_allowed(host) and self._authorized(headers.get(b"authorization"))
        if scope["type"] == "websocket" and not allowed:
            await send({"type": "websocket.close", "code": 1008})
            return
        if not host_allowed(host):
            logger.warning("refused a request for host %r (DNS rebinding guard)", host)
            await _refuse(
                send,
                403,
                "policy_denied",
                f"requests must be addressed to localhost, not {host or 'no host'!r}",
                "use http://127.0.0.1:<port> or http://localhost:<port>",
            )
            return
        if self._token is not None and not self._is_page(scope):
            given = headers.get(b"authorization", b"")
            if not self._authorized(given):
                await _refuse(
                    send,
                    401,
                    "unauthorized",
                    "a bearer token is required on TCP" if not given else "wrong bearer token",
                    "send `Authorization: Bearer <token>`; `memoryd token` prints it",
                    extra=[(b"www-authenticate", b"Bearer")],
                )
                return
        origin = headers.get(b"origin")
        if (
            origin is not None
            and scope["type"] == "http"
            and scope.get("method") not in PAGE_METHODS
            and origin.lower() != b"http://" + host.lower().encode("latin-1")
        ):
            logger.warning("refused a write from the origin %r", origin)
            await _refuse(
                send,
                403,
                "policy_denied",
                f"a write from {origin.decode('latin-1')!r} is refused: only pages the daemon"
                " serves may write",
                "edit from the graph page (`memoryd ui`) or without a browser",
            )
            return
        if str(scope.get("path", "")).startswith(self._refused):
            await _refuse(
                send,
                403,
                "policy_denied",
                f"{scope.get('path')} names files on the daemon's machine and is served on the"
                " Unix socket only",
                "run the memoryd command on the daemon's machine (it uses the socket)",
            )
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        declared = headers.get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            await _too_large(send, f"the request body is {int(declared)} bytes")
            return
        await limit_body(self.app, scope, receive, send)


class BodyTooLarge(Exception):
    """Raised from `receive` when a request body passes MAX_BODY_BYTES."""


async def limit_body(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, limit: int = MAX_BODY_BYTES
) -> None:
    """Run `app`, counting the request body as it streams in, whatever its framing.

    A chunked body declares no length, so the Content-Length check alone let a 400 MB upload
    be buffered whole before validation refused it. Here `receive` raises as soon as the count
    passes `limit`; whatever the app then answers (it may turn the error into a 400 or a 500)
    is replaced by one 413 that closes the connection, so the rest is never read.
    """
    received = 0
    over = False
    started = False

    async def counted() -> Message:
        nonlocal received, over
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                over = True
                raise BodyTooLarge(f"request body over {limit} bytes")
        return message

    async def guarded(message: Message) -> None:
        nonlocal started
        if over and not started:
            return  # the app's answer to the overflow: the 413 below replaces it
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, counted, guarded)
    except Exception:
        if not over or started:
            raise
    if over and not started:
        logger.warning("refused a request body over %d bytes (%s)", limit, scope.get("path"))
        await _too_large(send, f"the request body passed {limit} bytes", limit)


async def _too_large(send: Send, what: str, limit: int = MAX_BODY_BYTES) -> None:
    await _refuse(
        send,
        413,
        "invalid_input",
        f"{what}; the limit is {limit} bytes",
        "a memory body is at most 1,000,000 characters; split larger texts",
        extra=[(b"connection", b"close")],  # do not read the rest of it
    )


async def _refuse(
    send: Send,
    status: int,
    code: str,
    message: str,
    hint: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(error_body(code, message, hint)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
