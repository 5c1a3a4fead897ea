"""ASGI plumbing the team's middlewares share: read a JSON body, replay one, run an app on
one request and keep its whole answer (to check it before it goes), send an answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memoryd.api.errors import error_body
from memoryd.api.security import MAX_BODY_BYTES
from memoryd.errors import InvalidInput

MAX_BODY = MAX_BODY_BYTES
"""The daemon's own limit: a body the daemon takes is not refused in front of it."""
Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
JSON = [(b"content-type", b"application/json")]


class Refused(Exception):
    """An answer a middleware gives itself (status and error body) instead of the app's."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body["error"]["message"])
        self.status = status
        self.body = body


async def json_body(receive: Receive) -> dict[str, Any]:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidInput("the client went away before sending its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise Refused(
                413, error_body("too_large", f"the body is over {MAX_BODY:,} bytes", "send less")
            )
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    try:
        data = json.loads(b"".join(chunks))
    except ValueError as exc:
        raise InvalidInput(f"the body is not JSON: {exc}", hint="send a JSON object") from exc
    if not isinstance(data, dict):
        raise InvalidInput("the body is not a JSON object", hint="send a JSON object")
    return data


def replay(body: dict[str, Any] | None) -> Receive:
    raw = b"" if body is None else json.dumps(body).encode("utf-8")
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return receive


async def call(
    app: Any, scope: Scope, receive: Receive
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Run the app on one request and keep its whole answer, to check it before it goes."""
    started: Message = {}
    chunks: list[bytes] = []

    async def collect(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, collect)
    return int(started.get("status", 500)), list(started.get("headers", [])), b"".join(chunks)


async def send_answer(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    kept = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    kept.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": status, "headers": kept})
    await send({"type": "http.response.body", "body": body})


async def answer_error(send: Send, status: int, body: dict[str, Any]) -> None:
    headers = [(b"content-type", b"application/json")]
    await send_answer(send, status, headers, json.dumps(body).encode("utf-8"))
