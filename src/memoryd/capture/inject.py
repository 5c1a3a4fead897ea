"""`memoryd inject`: recall into the agent at SessionStart and UserPromptSubmit.

The hook reads the agent's payload on stdin (cwd → scope, the prompt when there is one),
recalls the memories that matter for that scope and prompt, and prints them as the agent's
documented `additionalContext` reply (FORMATS.md §3.3, §4.1, §5). Long-term, current (not
superseded) memories come first; each line names the slug it came from; the whole text stays
within a token budget (about 4 characters a token), cut at sentence boundaries. With
`[inject] identity = true` a session starts with a short identity section first (the top of
profile/identity.md, at most `identity_tokens` and a third of the budget); it is off by
default.

Like `memoryd capture` it never breaks the agent: it always exits 0, prints nothing but the
documented JSON (or nothing), and logs what went wrong to `<home>/logs/inject.log`. It runs
before the full CLI is imported (see `memoryd.entry`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memoryd.context import Item, choose
from memoryd.private import make_private_dir

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

LOG_FILE = "inject.log"
LOG_MAX_BYTES = 2_000_000
CHARS_PER_TOKEN = 4
DEFAULT_BUDGET_TOKENS = 1500
DEFAULT_K = 8
MEMORY_CHARS = 700
"""At most this much of one memory's body, so one long memory cannot crowd out the others."""
BUDGET_ENV = "MEMORYD_INJECT_BUDGET_TOKENS"
SOURCES = ("claude-code", "codex", "cursor", "gemini", "windsurf", "copilot", "manual")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s|\n")
CONTEXT_ROUTE = "/v1/recall/context"
IDENTITY_FILE = Path("profile") / "identity.md"
"""`governance.profile.IDENTITY_FILE` (the hook cannot afford to import that module)."""
IDENTITY_SHARE = 3
"""The identity section never takes more than a third of the budget."""
DAEMON_TIMEOUT_S = 5.0
"""A hook that waits longer than this has already cost the agent more than it gives."""
READY_WAIT_S = 1.0
"""With no daemon, the hook starts one and waits this long (from its start) for its socket."""
FIRST_ANSWER_S = 1.4
"""…and answers within this much in all: a fresh daemon's first recall may be slow."""


class Args:
    """The command line. Plain classes here and in `context`, not dataclasses: importing
    `dataclasses` (it imports `inspect`) is a cost each prompt's hook would pay."""

    def __init__(self) -> None:
        self.source = "claude-code"
        self.home: Path | None = None
        self.k = DEFAULT_K
        self.budget_tokens = DEFAULT_BUDGET_TOKENS
        self.errors: list[str] = []


class HookCall:
    """What the payload says: which event, where, and the prompt if there is one."""

    def __init__(self, event: str = "", cwd: str | None = None, prompt: str | None = None) -> None:
        self.event = event
        self.cwd = cwd
        self.prompt = prompt

    def __repr__(self) -> str:
        return f"HookCall(event={self.event!r}, cwd={self.cwd!r}, prompt={self.prompt!r})"


ITEM_FIELDS = ("slug", "type", "title", "body", "created_at")


def parse_args(argv: Sequence[str]) -> Args:
    """`--source X --home DIR -k N --budget-tokens N` (also `--opt=value`); never raises."""
    args = Args()
    env_budget = os.environ.get(BUDGET_ENV)
    if env_budget and env_budget.isdigit():
        args.budget_tokens = int(env_budget)
    home = os.environ.get("MEMORYD_HOME")
    args.home = Path(home).expanduser() if home else None
    items = list(argv)
    i = 0
    while i < len(items):
        name, sep, value = items[i].partition("=")
        if not sep and name.startswith("-") and i + 1 < len(items):
            value = items[i + 1]
            i += 1
        i += 1
        try:
            if name == "--source":
                args.source = value
            elif name == "--home":
                args.home = Path(value).expanduser()
            elif name in ("-k", "--k"):
                args.k = max(1, int(value))
            elif name == "--budget-tokens":
                args.budget_tokens = max(50, int(value))
            else:
                args.errors.append(f"unknown argument {items[i - 1]!r}")
        except ValueError:
            args.errors.append(f"{name} {value!r} is not a number")
    return args


def parse_payload(text: str) -> HookCall:
    """The event, cwd and prompt of any agent's hook payload (unknown shapes give blanks)."""
    try:
        payload = json.loads(text) if text.strip() else {}
    except ValueError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    call = HookCall()
    event = payload.get("hook_event_name") or payload.get("hookEventName")
    event = event or payload.get("agent_action_name") or ""
    call.event = str(event)
    cwd = payload.get("cwd")
    roots = payload.get("workspace_roots")
    if not cwd and isinstance(roots, list) and roots:
        cwd = roots[0]
    tool_info = payload.get("tool_info")
    if not cwd and isinstance(tool_info, dict):
        cwd = tool_info.get("cwd")
    call.cwd = str(cwd) if isinstance(cwd, str) and cwd else None
    prompt = payload.get("prompt") or payload.get("initialPrompt")
    if not prompt and isinstance(tool_info, dict):
        prompt = tool_info.get("user_prompt")
    call.prompt = prompt.strip() if isinstance(prompt, str) and prompt.strip() else None
    if not call.event:
        if "initialPrompt" in payload or ("source" in payload and "prompt" not in payload):
            call.event = "sessionStart"
        elif "prompt" in payload:
            call.event = "userPromptSubmitted"
    return call


# -- the agent's reply ------------------------------------------------------------------------
def reply(source: str, call: HookCall, context: str) -> str:
    """The agent's documented stdout for this event, with `context` injected where it can be.

    Claude Code, Codex and Gemini CLI take `hookSpecificOutput.additionalContext` (Codex
    rejects any other key). Cursor's `sessionStart` takes `additional_context`; its
    `beforeSubmitPrompt` cannot inject and must answer `{"continue": true}`. Gemini parses
    stdout as JSON, so it always gets an object. Windsurf and Copilot have no way to inject
    context from a hook: nothing is printed.
    """
    if source in ("claude-code", "codex", "gemini", "manual"):
        if not context:
            return "{}" if source == "gemini" else ""
        event = call.event or ("UserPromptSubmit" if call.prompt else "SessionStart")
        output = {"hookEventName": event, "additionalContext": context}
        return json.dumps({"hookSpecificOutput": output}, ensure_ascii=False)
    if source == "cursor":
        if call.event == "beforeSubmitPrompt":
            return '{"continue": true}'
        if context:
            return json.dumps({"additional_context": context}, ensure_ascii=False)
        return "{}"
    return ""


def can_inject(source: str, call: HookCall) -> bool:
    if source in ("claude-code", "codex", "gemini", "manual"):
        return True
    return source == "cursor" and call.event in ("sessionStart", "")


# -- choosing and rendering memories ----------------------------------------------------------
def cut_at_sentence(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at the last sentence end when there is one."""
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    if len(text) <= limit:
        return text
    if limit <= 1:
        return ""
    head = text[:limit]
    ends = [m.start() for m in _SENTENCE_END.finditer(head + " ")]
    ends = [e for e in ends if e >= limit // 3]
    if ends:
        return head[: ends[-1]].rstrip()
    space = head[: limit - 1].rfind(" ")
    return (head[:space] if space > limit // 3 else head[: limit - 1]).rstrip() + "…"


def identity_section(home: Path, tokens: int) -> str:
    """The top of profile/identity.md in at most `tokens` (whole lines, the title and the
    compiled label left out), or "" when there is no identity."""
    try:
        text = (home / IDENTITY_FILE).read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    header = "memoryd identity (profile/identity.md):"
    room = tokens * CHARS_PER_TOKEN - len(header) - 1
    kept: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line or line.startswith("# ") or (line.startswith("_") and line.endswith("_")):
            continue
        if len(line) + 1 > room:
            if all(k.startswith("#") for k in kept) and room > 40:
                kept.append(cut_at_sentence(line, room - 1))  # at least one statement
            break
        kept.append(line)
        room -= len(line) + 1
    kept = [line for line in kept if line]
    while kept and kept[-1].startswith("#"):
        kept.pop()  # a heading with nothing under it
    return "\n".join([header, *kept]) if kept else ""


def render(
    items: Sequence[Item], scope_hash: str | None, budget_tokens: int, identity: str = ""
) -> str:
    """The context text: the identity section when given, a header, then one entry per
    memory, all within the budget."""
    budget = budget_tokens * CHARS_PER_TOKEN - (len(identity) + 1 if identity else 0)
    header = f"memoryd recall (scope {scope_hash}):" if scope_hash else "memoryd recall:"
    lines = [header]
    used = len(header)
    for item in items:
        date = item.created_at[:10]
        lead = f"- {item.type} {date}: {item.title} [{item.slug}]"
        room = budget - used - 1
        if room < len(lead):
            break
        body = " ".join(item.body.split())
        if body and body != item.title:
            space = min(MEMORY_CHARS, room - len(lead) - 3)
            cut = cut_at_sentence(body, space) if space > 40 else ""
            entry = f"{lead} — {cut}" if cut else lead
        else:
            entry = lead
        lines.append(entry)
        used += len(entry) + 1
    recalled = "\n".join(lines) if len(lines) > 1 else ""
    return "\n".join(part for part in (identity, recalled) if part)


# -- talking to the daemon with the standard library only -----------------------------------
class NoDaemon(Exception):
    """Nothing listens on the data dir's socket: recall in-process instead."""


def _exchange(path: Path, request: bytes, timeout_s: float) -> bytes:
    """Send one HTTP/1.1 request on the Unix socket and read the whole answer.

    Not httpx (with pydantic, more to import than a hook may take) and not http.client (it
    imports ssl and the email parser, most of what the hook would import): the request is one
    JSON POST with `Connection: close`."""
    if sys.platform == "win32":  # the daemon listens on a Unix socket only
        raise NoDaemon("no Unix socket on Windows")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
            raise NoDaemon(str(exc)) from exc
        sock.sendall(request)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    finally:
        sock.close()
    return b"".join(chunks)


def _parse_response(raw: bytes) -> tuple[int, bytes]:
    """The status and body of an HTTP/1.1 answer (Content-Length or chunked)."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split()
    if not sep or len(parts) < 2 or not parts[1].isdigit():
        raise RuntimeError(f"the daemon's answer is not HTTP: {raw[:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            body, rest = body + rest[:size], rest[size + 2 :]
        return int(parts[1]), body
    length = headers.get(b"content-length")
    return int(parts[1]), rest[: int(length)] if length and length.isdigit() else rest


def items_from_daemon(
    home: Path,
    prompt: str | None,
    scope_hash: str | None,
    k: int,
    timeout_s: float,
    scope_path: str | None = None,
) -> list[Item]:
    """`POST /v1/recall/context` on the daemon's socket; NoDaemon when none listens. The
    scope's path goes beside its hash, for a daemon in a team (`SCOPE_PATH_HEADER`)."""
    from memoryd.daemon_files import SOCKET_NAME
    from memoryd.memfile import SCOPE_PATH_HEADER, scope_path_header

    body = json.dumps({"prompt": prompt, "scope": scope_hash, "k": k}).encode()
    where = f"{SCOPE_PATH_HEADER}: {scope_path_header(scope_path)}\r\n" if scope_path else ""
    head = (
        f"POST {CONTEXT_ROUTE} HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/json\r\nX-Memoryd-Actor: inject\r\n{where}"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    status, payload = _parse_response(
        _exchange(home / SOCKET_NAME, head.encode("ascii") + body, timeout_s)
    )
    data = json.loads(payload or b"{}")
    if status != 200:
        error = data.get("error", {}) if isinstance(data, dict) else {}
        raise RuntimeError(f"the daemon answered {status}: {error.get('message', data)}")
    return [
        Item(**{name: str(row.get(name) or "") for name in ITEM_FIELDS}) for row in data["items"]
    ]


# -- the hook ---------------------------------------------------------------------------------
@contextlib.contextmanager
def inject_logging(home: Path) -> Iterator[None]:
    """memoryd's log records go to `<home>/logs/inject.log` (never stdout) during the hook."""
    package = logging.getLogger("memoryd")
    path = home / "logs" / LOG_FILE
    handler: logging.Handler
    try:
        make_private_dir(path.parent)
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size > LOG_MAX_BYTES:
                os.replace(path, path.with_name(LOG_FILE + ".1"))
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    previous, propagate = package.level, package.propagate
    package.setLevel(logging.INFO)
    package.propagate = False
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)
        handler.close()
        package.setLevel(previous)
        package.propagate = propagate


def context_for(args: Args, call: HookCall, started: float | None = None) -> str:
    """Ask the daemon for the memories (the fast path). With none, start one and answer
    nothing unless it is ready within `READY_WAIT_S` of `started` (time.monotonic); when the
    user opted out of autostart, recall in-process (slow: the stores open in this process)."""
    from memoryd.autostart import opted_out
    from memoryd.capture_limits import load_capture_config
    from memoryd.memfile import scope_of

    config = load_capture_config(args.home)
    home = config.home
    scope = scope_of(call.cwd) if call.cwd else None
    scope_hash, scope_path = (scope.scope_hash, scope.path) if scope else (None, None)
    identity = ""
    if config.inject.identity and not call.prompt:  # once, at the start of a session
        share = min(config.inject.identity_tokens, args.budget_tokens // IDENTITY_SHARE)
        identity = identity_section(home, share)
    try:
        items = items_from_daemon(
            home, call.prompt, scope_hash, args.k, DAEMON_TIMEOUT_S, scope_path
        )
    except NoDaemon:
        if opted_out(config.autostart):
            items = _items_in_process(home, call.prompt, scope_hash, args.k)
        else:
            begun = time.monotonic() if started is None else started
            items = _items_from_new_daemon(home, call.prompt, scope_hash, args.k, begun, scope_path)
    return render(items, scope_hash, args.budget_tokens, identity)


def _items_from_new_daemon(
    home: Path,
    prompt: str | None,
    scope_hash: str | None,
    k: int,
    started: float,
    scope_path: str | None = None,
) -> list[Item]:
    """Start the daemon in the background; its answer if it comes within the budget, else
    none (the next prompt finds the daemon)."""
    from memoryd.autostart import start_in_background, wait_for_socket

    if not start_in_background(home):
        return []  # logged why
    if not wait_for_socket(home, started + READY_WAIT_S):
        logger.info("inject: the daemon is starting; this prompt gets no recall")
        return []
    left = max(0.1, started + FIRST_ANSWER_S - time.monotonic())
    try:
        return items_from_daemon(home, prompt, scope_hash, k, left, scope_path)
    except (NoDaemon, TimeoutError) as exc:
        logger.info("inject: the new daemon did not answer within the budget (%s)", exc)
        return []


def _items_in_process(home: Path, prompt: str | None, scope_hash: str | None, k: int) -> list[Item]:
    from memoryd.client.connect import open_service_or_client
    from memoryd.config import load_settings

    with open_service_or_client(load_settings(home)) as svc:
        items, _ = choose(svc, prompt, scope_hash, k)
    return items


def _read_stdin(stream: IO[Any] | None) -> str:
    if stream is None or stream.isatty():
        return ""
    data = stream.read()
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return str(data)


def _home(args: Args) -> Path:
    from memoryd.capture_limits import load_capture_config

    return load_capture_config(args.home).home


def main(
    argv: Sequence[str], *, stdin: IO[Any] | None = None, stdout: IO[str] | None = None
) -> int:
    """Run one inject hook call. Always returns 0; stdout gets only the documented reply."""
    started = time.monotonic()
    out = stdout or sys.stdout
    args = parse_args(argv)
    call = HookCall()
    text = ""
    try:
        home = _home(args)
    except Exception:
        home = Path.home() / ".memoryd"
    with inject_logging(home):
        try:
            stream = stdin if stdin is not None else getattr(sys.stdin, "buffer", sys.stdin)
            call = parse_payload(_read_stdin(stream))
            for problem in args.errors:
                logger.warning("inject: %s", problem)
            if args.source not in SOURCES:
                logger.warning("inject: unknown --source %r", args.source)
            elif can_inject(args.source, call):
                text = context_for(args, call, started)
        except Exception:
            logger.exception("inject failed (source %s, event %s)", args.source, call.event)
            text = ""
    answer = reply(args.source, call, text)
    if answer:
        with contextlib.suppress(OSError, ValueError):
            out.write(answer + "\n")
            out.flush()
    return 0
