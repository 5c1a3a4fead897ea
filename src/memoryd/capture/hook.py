"""`memoryd capture`: one hook call, at most one session memory, and the agent never breaks.

`main` is what the hook runs. Whatever happens it returns 0 and writes to stdout only the
agent's documented reply (`sources.stdout_reply`). Its work runs under a wall-time budget
(`capture.budget_ms`, enforced with SIGALRM); anything that goes wrong — bad JSON, a missing
transcript, a read-only data dir, the budget, a bug — is logged to `<home>/logs/capture.log`
(stderr when that cannot be written) and the redacted payload is kept in `<home>/inbox/failed/`
for `memoryd capture retry`, which replays it without a budget.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any, NamedTuple

from memoryd import memfile
from memoryd.capture import sealing
from memoryd.capture.sources import (
    AGENT_NAMES,
    HookInput,
    InvalidPayload,
    parse_input,
    stdout_reply,
)
from memoryd.capture.transcripts import TranscriptUnreadable, read_session_file
from memoryd.capture_limits import CaptureConfig, CaptureLimits, load_capture_config
from memoryd.inbox import Inbox, IndexRequest, now_ts, write_atomically
from memoryd.private import make_private_dir
from memoryd.redact import clean_slug, redact, redact_json
from memoryd.sensitive.sealed import read_public_key, waiting_captures
from memoryd.sessions import journal
from memoryd.sessions.session import Session
from memoryd.sessions.summary import summarize, trivial_reason

logger = logging.getLogger(__name__)

LOG_DIR = "logs"
LOG_FILE = "capture.log"
LOG_MAX_BYTES = 2_000_000


class CaptureTimeout(Exception):
    """The capture ran past its budget; the payload is kept for `capture retry`."""


class SessionFileMissing(Exception):
    """The payload names a session file that is not there, and the payload alone says too little."""


_EXPECTED = (InvalidPayload, TranscriptUnreadable, OSError, CaptureTimeout, SessionFileMissing)
"""Failures logged in one line; anything else is a bug and is logged with its traceback."""


class Outcome(NamedTuple):
    """What one capture did: captured, updated, unchanged, skipped, journaled or ignored."""

    status: str
    slug: str | None = None
    path: Path | None = None
    reason: str = ""


class Args:
    """`memoryd capture`'s arguments, parsed without click (see the package docstring)."""

    __slots__ = ("home", "positional", "problems", "source")

    def __init__(self) -> None:
        self.source = "manual"
        self.home: str | None = None
        self.positional: list[str] = []
        self.problems: list[str] = []

    @property
    def retry(self) -> bool:
        return self.positional == ["retry"]

    @property
    def payload_arg(self) -> str | None:
        return self.positional[-1] if self.positional else None


def parse_args(argv: list[str]) -> Args:
    """`--source X`, `--home X` (or `=X`), then `retry`, a JSON payload or a session file."""
    args = Args()
    items = iter(argv)
    for item in items:
        name, sep, value = item.partition("=")
        if name in ("--source", "--home"):
            if not sep:
                value = next(items, "")
            if name == "--source":
                args.source = value
            else:
                args.home = value or None
        elif item.startswith("--") and not item.startswith("--{"):
            args.problems.append(f"ignored unknown option {name}")
        else:
            args.positional.append(item)
    return args


# -- logging -------------------------------------------------------------------------------
class _RedactingFormatter(logging.Formatter):
    """Log lines go through the same redaction as memories: a secret in an error stays hidden."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _log_handler(home: Path) -> logging.Handler:
    path = home / LOG_DIR / LOG_FILE
    try:
        make_private_dir(path.parent)
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size > LOG_MAX_BYTES:
                os.replace(path, path.with_name(LOG_FILE + ".1"))
        return logging.FileHandler(path, encoding="utf-8")
    except OSError:
        return logging.StreamHandler(sys.stderr)


@contextlib.contextmanager
def capture_logging(home: Path) -> Iterator[None]:
    """Send memoryd's log records to `<home>/logs/capture.log` while a capture runs."""
    package = logging.getLogger("memoryd")
    handler = _log_handler(home)
    handler.setFormatter(
        _RedactingFormatter("%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s")
    )
    handler.setLevel(logging.INFO)
    previous = package.level
    if previous == logging.NOTSET or previous > logging.INFO:
        package.setLevel(logging.INFO)
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)
        handler.close()
        package.setLevel(previous)


# -- budget ----------------------------------------------------------------------------------
@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise CaptureTimeout in the main thread after `seconds` (no-op where SIGALRM is missing)."""
    if (
        sys.platform == "win32"  # no SIGALRM: the agent's own hook timeout is the bound
        or seconds <= 0
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise CaptureTimeout(f"capture ran past its {seconds:.2f}s budget")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- the capture ---------------------------------------------------------------------------
def _file_session(hook: HookInput, limits: CaptureLimits) -> Session | None:
    path = hook.session_file
    if path is None or hook.file_format is None or not path.is_file():
        return None
    try:
        return read_session_file(path, hook.file_format, hook.agent, limits.max_transcript_bytes)
    except TranscriptUnreadable as exc:
        logger.warning("reading the session from hook events instead: %s", exc)
        return None


def _session_id(hook: HookInput, home: Path, session: Session | None, now: datetime) -> str:
    if hook.agent == "copilot":
        scope = memfile.scope_of(hook.cwd)
        return journal.copilot_session_id(home, scope.scope_hash, hook.event, hook.ts or now)
    found = hook.session_id or (session.session_id if session else None)
    if not found and hook.session_file is not None:
        found = hook.session_file.stem
    if not found:
        raise InvalidPayload(f"the {hook.source} payload names no session")
    return clean_slug(str(found))  # it names the memory's slug, file and journal


def _journal(
    hook: HookInput,
    config: CaptureConfig,
    sid: str,
    scope_hash: str | None,
    sealed: sealing.SealedScope | None,
) -> bool:
    """Journal the call's events: in plain text in a plain scope (each naming the scope, so
    marking it later finds the journal), sealed in a sensitive one (never in plain text:
    without a capture key nothing is kept). Whether they were kept sealed."""
    limits = config.limits
    if sealed is None:
        journal.Journal(config.home, hook.agent, sid).append(
            hook.events, high_entropy=limits.redact_high_entropy, scope=scope_hash
        )
        return False
    if sealed.public is None:
        return False
    key = journal.journal_key(hook.agent, sid)
    sealing.journal_events(config.home, sealed.scope_hash, sealed.public, key, hook.events, limits)
    return True


def load_session(
    hook: HookInput, config: CaptureConfig, now: datetime
) -> tuple[Session, str] | None:
    """The session to summarise and its id, or None when this event is only journaled.

    In a sensitive scope the events are journaled sealed (`journal.SealedJournal`); the
    hook cannot read them back, so the session it returns holds only this call's events and
    the service assembles the whole one (`capture` marks the box with a `SealedPlan`)."""
    limits, home = config.limits, config.home
    if hook.ts is not None:
        stamp = memfile.format_ts(hook.ts)
        for item in hook.events:
            item.setdefault("ts", stamp)
    has_file = hook.session_file is not None and hook.session_file.is_file()
    cwd = sealing.call_cwd(hook)
    scope_hash = memfile.scope_of(cwd).scope_hash if cwd else None
    sealed = sealing.sealed_scope(home, scope_hash)
    if not hook.render:
        if not has_file and hook.events:
            _journal(hook, config, _session_id(hook, home, None, now), scope_hash, sealed)
        return None
    session = _file_session(hook, limits) if has_file else None
    if session is None and hook.agent == "manual":  # one call says it all: nothing to collect
        session = journal.session_from_events(
            hook.agent, _session_id(hook, home, None, now), hook.events
        )
    if session is None:
        sid = _session_id(hook, home, None, now)
        if sealed is None:
            events = journal.Journal(home, hook.agent, sid)
            events.append(hook.events, high_entropy=limits.redact_high_entropy, scope=scope_hash)
            session = journal.session_from_events(hook.agent, sid, events.read())
            if hook.file_expected and trivial_reason(session, limits):
                raise SessionFileMissing(
                    f"session file {hook.session_file} is missing or unreadable"
                )
        else:
            journaled_before = journal.SealedJournal(home, journal.journal_key(hook.agent, sid))
            earlier = journaled_before.path.exists()
            session = journal.session_from_events(hook.agent, sid, hook.events)
            if hook.file_expected and not earlier and trivial_reason(session, limits):
                raise SessionFileMissing(
                    f"session file {hook.session_file} is missing or unreadable"
                )
            hook.journaled = _journal(hook, config, sid, scope_hash, sealed)
    session_id = session.session_id = _session_id(hook, home, session, now)
    if hook.final:
        session.final = hook.final  # Stop's last_assistant_message: newer than the transcript
    session.model = session.model or hook.model
    session.seen(hook.ts)
    return session, session_id


def _cwd(hook: HookInput, session: Session) -> str | None:
    if hook.cwd or session.cwd:
        return hook.cwd or session.cwd
    return memfile.scope_for_files(path for call in session.tools for path, _ in call.files())


def capture(
    source: str,
    stdin_text: str,
    arg: str | None,
    config: CaptureConfig,
    *,
    now: datetime | None = None,
) -> Outcome:
    """Capture one hook call. Raises on failure; `main` turns that into a kept payload."""
    now = now or datetime.now(UTC)
    hook = parse_input(source, stdin_text, arg)
    loaded = load_session(hook, config, now)
    if loaded is None:
        status = "journaled" if hook.events else "ignored"
        return Outcome(status, reason=f"{hook.event or 'event'} does not write the memory")
    session, session_id = loaded
    scope = memfile.scope_of(_cwd(hook, session))
    home, limits = config.home, config.limits
    sealed_for: bytes | None = None
    if memfile.scope_is_sensitive(home, scope.scope_hash):
        sealed_for = read_public_key(home, scope.scope_hash)
        if sealed_for is None:
            return Outcome(
                "skipped",
                reason="sensitive scope without a capture key (seal.pub): run"
                " `memoryd sensitive mark` on it again",
            )
    reason = trivial_reason(session, limits)
    if reason and not hook.journaled:  # a sealed journal is judged whole, where it is read
        return Outcome("skipped", reason=f"trivial session: {reason}")
    roots = [scope.path, *([session.cwd] if session.cwd else [])]
    summary = summarize(
        session, limits, agent_name=AGENT_NAMES[hook.agent], roots=roots, title=hook.title
    )
    plan: journal.SealedPlan | None = None
    if hook.journaled:
        plan = journal.SealedPlan(
            journal=journal.journal_key(hook.agent, session_id),
            agent=hook.agent,
            session_id=session_id,
            agent_name=AGENT_NAMES[hook.agent],
            roots=roots,
            title=hook.title,
            final=hook.final,
            model=session.model,
            ts=memfile.format_ts(hook.ts or now),
            limits=limits._asdict(),
        )
    if sealed_for is not None:
        slug = memfile.sealed_session_slug(sealed_for, hook.agent, session_id)
    else:
        slug = memfile.session_slug(hook.agent, session_id)
    created = session.started_at or hook.ts or now
    fields: dict[str, Any] = {
        "title": summary.title,
        "slug": slug,
        "type": "session",
        "scope_hash": scope.scope_hash,
        "source": hook.agent,
        "created_at": memfile.format_ts(created),
        "updated_at": memfile.format_ts(now),
        "tags": summary.tags,
        "triggers": summary.triggers,
        "ttl_days": memfile.SESSION_TTL_DAYS,
        "decay_state": "alive",
        "recall_count": 0,
        "session_id": session_id,
        "agent": hook.agent,
        "model": session.model,
    }
    if sealed_for is not None:
        slug = str(fields["slug"])
        kept = sealing.seal_session(home, scope.scope_hash, sealed_for, fields, summary.body, plan)
        outcome = Outcome("sealed", slug=slug, path=kept)
    else:
        with journal.session_lock(home, hook.agent, session_id):
            outcome = _write(home, scope, fields, summary.body)
    with contextlib.suppress(OSError):
        journal.prune(home, limits.journal_ttl_days)
    return outcome


def _write(home: Path, scope: memfile.ScopeRef, fields: dict[str, Any], body: str) -> Outcome:
    """Write the session's memory under its file lock: the daemon's enrichment worker
    rewrites the same file, and neither side may lose what the other wrote."""
    with memfile.memory_lock(home, str(fields["slug"])):
        return _write_locked(home, scope, fields, body)


def _write_locked(
    home: Path, scope: memfile.ScopeRef, fields: dict[str, Any], body: str
) -> Outcome:
    slug = str(fields["slug"])
    path = memfile.find_session_file(home, slug)
    if path is not None and path.name.endswith(memfile.ENCRYPTED_SUFFIX):
        return Outcome("skipped", slug=slug, reason="the session's memory is encrypted")
    existing: str | None = None
    if path is None:
        path = home / memfile.SCOPES_DIR / scope.scope_hash / memfile.SESSIONS_DIR / f"{slug}.md"
    else:
        first_scope = path.parent.parent.name  # a memory stays in the scope it was made in
        if first_scope != scope.scope_hash and memfile.scope_is_sensitive(home, first_scope):
            return Outcome("skipped", slug=slug, reason="the session's scope is sensitive")
        existing = path.read_bytes().decode("utf-8", "replace")
        fields["scope_hash"] = first_scope
    text = memfile.compose(existing, fields, body)
    changed = existing is None or not memfile.same_content(existing, text)
    if changed:
        write_atomically(path, text.encode("utf-8"))
    same_scope = fields["scope_hash"] == scope.scope_hash
    scope_json = memfile.scope_file(home, scope.scope_hash)
    if same_scope and not scope_json.exists():
        write_atomically(scope_json, memfile.scope_json(scope))
    Inbox(home).submit(
        IndexRequest(
            slug=slug,
            path=str(path),
            scope_hash=str(fields["scope_hash"]),
            scope_path=scope.path if same_scope else None,
            source=str(fields["source"]),
            ts=now_ts(),
        )
    )
    status = "captured" if existing is None else "updated" if changed else "unchanged"
    return Outcome(status, slug=slug, path=path)


# -- the command -----------------------------------------------------------------------------
def _read_stdin(stream: IO[Any] | None) -> str:
    if stream is None:
        return ""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        if stream.isatty():
            return ""
    raw = stream.buffer.read() if hasattr(stream, "buffer") else stream.read()
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")


def redact_payload(text: str) -> str:
    """A payload safe to keep: JSON redacted value by value (stays parseable), else as text."""
    try:
        value = json.loads(text)
    except ValueError:
        return redact(text)
    return json.dumps(redact_json(value), ensure_ascii=False)


def _keep_failed(config: CaptureConfig, args: Args, stdin_text: str, exc: BaseException) -> None:
    error = redact(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, _EXPECTED):
        logger.error("capture --source=%s failed: %s", args.source, error)
    else:
        logger.error("capture --source=%s failed: %s", args.source, error, exc_info=exc)
    sealed = sealing.keep_failed(config.home, args.source, args.positional, stdin_text)
    if sealed is not None:
        logger.info("%s", sealed)
        return
    try:
        kept = Inbox(config.home).keep_failed(
            source=args.source,
            args=[redact_payload(a) if a.lstrip().startswith("{") else a for a in args.positional],
            stdin_text=redact_payload(stdin_text) if stdin_text.strip() else "",
            error=error,
        )
        logger.info("kept the payload for `memoryd capture retry` in %s", kept)
    except Exception as keep_exc:
        logger.error("could not keep the failed payload: %s", keep_exc)


def _reply(stdout: IO[str], text: str) -> None:
    if not text:
        return
    with contextlib.suppress(OSError, ValueError):
        stdout.write(text + "\n")
        stdout.flush()


def main(argv: list[str], *, stdin: IO[Any] | None = None, stdout: IO[str] | None = None) -> int:
    """Run `memoryd capture ARGV`; always 0 for a hook (`retry` reports its own status)."""
    out = stdout if stdout is not None else sys.stdout
    source, stdin_text, payload_arg = "", "", None
    try:
        args = parse_args(argv)
        source, payload_arg = args.source, args.payload_arg
        if args.retry:
            return retry_main(args, out)
        stdin_text = _capture_main(args, stdin)
    except BaseException as exc:  # last line of defence: report on stderr, still exit 0
        with contextlib.suppress(Exception):
            sys.stderr.write(redact(f"memoryd capture: {type(exc).__name__}: {exc}") + "\n")
    _reply(out, stdout_reply(source, stdin_text, payload_arg))
    return 0


def _capture_main(args: Args, stdin: IO[Any] | None) -> str:
    """Capture under the budget and the log; returns the payload read from stdin."""
    stdin_text = ""
    config = load_capture_config(args.home)
    with capture_logging(config.home):
        for problem in (*config.problems, *args.problems):
            logger.warning("%s", problem)
        try:
            with deadline(config.limits.budget_ms / 1000):
                if not args.payload_arg:
                    stdin_text = _read_stdin(stdin if stdin is not None else sys.stdin)
                outcome = capture(args.source, stdin_text, args.payload_arg, config)
            logger.info(
                "capture --source=%s: %s %s %s",
                args.source,
                outcome.status,
                outcome.slug or "",
                outcome.reason,
            )
        except BaseException as exc:  # the hook must never fail the agent
            _keep_failed(config, args, stdin_text, exc)
        from memoryd.autostart import start_unless_opted_out  # stdlib, never raises

        start_unless_opted_out(config.home, config.autostart)  # it indexes what we captured
    return stdin_text


class RetryReport(NamedTuple):
    processed: int
    failing: int


def retry_failed(config: CaptureConfig) -> RetryReport:
    """Replay every kept payload (no budget); a success removes it, a failure counts an attempt."""
    inbox = Inbox(config.home)
    processed = failing = 0
    for entry in inbox.failed():
        try:
            text = entry.stdin_file.read_bytes().decode("utf-8", "replace")
            arg = entry.args[-1] if entry.args else None
            outcome = capture(entry.source, text, arg, config)
        except Exception as exc:
            failing += 1
            error = redact(f"{type(exc).__name__}: {exc}")
            logger.warning("retry of %s failed again: %s", entry.meta_file.name, error)
            with contextlib.suppress(OSError, ValueError):
                inbox.note_retry_failure(entry, error)
            continue
        processed += 1
        logger.info("retried %s: %s %s", entry.meta_file.name, outcome.status, outcome.slug or "")
        inbox.forget_failed(entry)
    return RetryReport(processed=processed, failing=failing)


def replayer(config: CaptureConfig) -> sealing.Replay:
    """A kept payload captured again, without the hook's budget (a user or the daemon asked)."""

    def replay(source: str, stdin_text: str, arg: str | None) -> str:
        outcome = capture(source, stdin_text, arg, config)
        return f"{outcome.status} {outcome.slug or ''}".strip()

    return replay


def retry_sealed_and_index(config: CaptureConfig) -> tuple[sealing.SealedRetry, int]:
    """Replay the sealed failed payloads where the scope keys are (the daemon when one
    serves this home, else the service in this process), then index what waits."""
    home = config.home
    waiting = sealing.failed_boxes(home)
    if not waiting:
        return sealing.SealedRetry(0, 0, []), index_waiting(home)
    from memoryd.client.connect import index_captures, is_remote, open_api
    from memoryd.config import load_settings
    from memoryd.errors import MemorydError
    from memoryd.service import MemoryService

    try:
        with open_api(load_settings(home)) as api:
            if is_remote(api):
                got = api.retry_sealed_captures()
                done = sealing.SealedRetry(got.processed, got.failing, got.errors)
            else:
                assert isinstance(api, MemoryService)  # open_api returns one or the other
                done = sealing.replay_failed(home, api.open_failed_capture, replayer(config))
            return done, index_captures(api)
    except MemorydError as exc:
        error = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
        logger.warning("could not replay the sealed failed captures: %s", error)
        return sealing.SealedRetry(0, len(waiting), [error]), 0


def index_waiting(home: Path) -> int:
    """Index the captures waiting in the inbox (by the daemon when one runs, else in process
    with their spaCy rules) so reads have none to report; a user runs it: it may take seconds."""
    if not Inbox(home).requested_slugs() and not waiting_captures(home):
        return 0
    from memoryd.client.connect import index_captures, open_api
    from memoryd.config import load_settings
    from memoryd.errors import MemorydError

    try:
        with open_api(load_settings(home)) as api:
            return index_captures(api)
    except MemorydError as exc:
        logger.warning("could not index the waiting captures: %s", exc)
        return 0


def retry_main(args: Args, out: IO[str]) -> int:
    config = load_capture_config(args.home)
    with capture_logging(config.home):
        report = retry_failed(config)
        sealed, indexed = retry_sealed_and_index(config)
    processed = report.processed + sealed.processed
    failing = report.failing + sealed.failing
    _reply(
        out,
        f"retried {processed + failing} failed capture(s): {processed} processed,"
        f" {failing} still failing (see {config.home / LOG_DIR / LOG_FILE})"
        + (f"; indexed {indexed} waiting capture(s)" if indexed else "")
        + "".join(f"\n  {error}" for error in sealed.errors),
    )
    return 0 if failing == 0 else 1
