"""The memory body of a session, made without an LLM.

Sections, each only when it has something to say:

* **Asked** — the user's prompts (long ones keep their start and end);
* **Decided / concluded** — sentences with decision or causal language ("decided", "instead
  of", "because", "the fix was", "root cause", 决定, 因为 …) from the conversation;
* **Files changed** and **Commands run** — from the tool calls (memoryd's own calls excluded);
* **Errors** — failing tool calls with the telling line of their output;
* **Earlier in the session** — the agent's own compaction summary, when it made one;
* **Along the way** — the agent's messages before its last, in order, each with a compact
  note of the tool calls it led to (files changed, commands run): the decisions, file names
  and versions of the middle of a session live there;
* **Final answer** — the agent's last message.

Bulk tool output never enters the body, nor do tool calls an exporter rendered into a message
as markup (`readable`). The body fills `max_body_bytes`: when the sections do not fit, every
part is shortened (fewer items, shorter excerpts, always keeping head and tail and saying how
much was left out, with the headings of what was) until they do; when they fit with room to
spare, every part keeps more, up to whole messages (`_grow`), since recall finds a session by
the words its body holds. Every text is redacted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import NamedTuple, TypeVar

from memoryd.capture_limits import CaptureLimits
from memoryd.redact import redact, redact_excerpt, safe_cut
from memoryd.sessions.session import Session, ToolCall

_DECISION = re.compile(
    r"(?i)\b(?:decid\w*|decision|chose|choose|chosen|going with|go with|settled on|opted"
    r"|switch(?:ed|ing)? (?:to|from)|migrat\w* (?:to|from)|instead of|rather than|prefer\w*"
    r"|we(?:'ll| will| should) use|because|so that|therefore|root cause|caused by|turns? out"
    r"|the (?:fix|problem|issue|bug|cause|reason) (?:is|was)|fixed|resolved|conclu\w+)\b"
    r"|决定|因为|所以|改用|选择|结论|原因|导致|修复"
)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_BULLET_START = frozenset("-*+•0123456789")
_TELLING = (
    "error",
    "exception",
    "failed",
    "failure",
    "fatal",
    "denied",
    "not found",
    "no such",
    "cannot",
)
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception)\b")
_BORING_COMMANDS = frozenset({"cd", "ls", "cat", "echo", "pwd", "head", "tail", "true", "sed"})
_RENDERED_TOOLS = re.compile(r"<(tool-use|details)\b[^>]*>.*?(?:</\1>|\Z)", re.DOTALL)
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+(.+?)[ \t]*#*\r?$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n(?:[ \t]*(?:---)?[ \t]*\r?\n){2,}")


T = TypeVar("T")


class Summary(NamedTuple):
    title: str
    body: str
    tags: list[str]
    triggers: list[str]


def trivial_reason(session: Session, limits: CaptureLimits) -> str | None:
    """Why the session is not worth a memory, or None when it is."""
    chars = (
        sum(map(len, session.prompts))
        + sum(map(len, session.assistant))
        + len(session.final or "")
        + sum(map(len, session.notes))
    )
    if session.notes:
        return None if chars >= limits.min_chars else f"{chars} characters, fewer than min_chars"
    if len(session.prompts) < limits.min_prompts:
        return f"{len(session.prompts)} user prompt(s), fewer than min_prompts"
    active = any(call.kind in ("command", "file") for call in session.visible_tools())
    if not active and chars < limits.min_chars:
        return f"no tool activity and {chars} characters of conversation, fewer than min_chars"
    return None


def _display_path(path: str, roots: Sequence[str]) -> str:
    for root in roots:
        root = root.rstrip("/")
        if root and path.startswith(root + "/"):
            return path[len(root) + 1 :]
    return path


def _one_line(text: str, limit: int, *, high_entropy: bool = True) -> str:
    """`text` on one line, at most `limit` characters; redacted first when it must be cut."""
    bound = 4 * limit + 1024
    head = text[:bound]
    line = " ".join(head.split())
    if len(text) > bound:
        line = line.rsplit(" ", 1)[0]  # the last word may be half of a secret
        return safe_cut(line, limit, high_entropy=high_entropy) + (
            "…" if len(line) <= limit else ""
        )
    return safe_cut(line, limit, high_entropy=high_entropy)


def _head_tail(items: list[T], limit: int) -> tuple[list[T], int, list[T]]:
    """The first third and the rest from the end of `items`, and how many are left between."""
    if len(items) <= limit:
        return items, 0, []
    head = max(1, limit // 3)
    tail = max(1, limit - head)
    return items[:head], len(items) - head - tail, items[-tail:]


def _bullets(items: list[T], limit: int, noun: str, render: Callable[[T], str]) -> list[str]:
    """The first and last of `items` as bullets, and how many are left between; only the
    items shown are rendered."""
    head, skipped, tail = _head_tail(items, limit)
    middle = [f"- … {skipped} more {noun} …"] if skipped else []
    return [
        *(f"- {render(item)}" for item in head),
        *middle,
        *(f"- {render(item)}" for item in tail),
    ]


def readable(text: str) -> str:
    """A message without the tool calls an exporter rendered into it as markup: SpecStory's
    `<tool-use>` blocks, collapsed `<details>` sections and the empty code fences Copilot
    Chat leaves for an edit. They are bulk (file contents, search results, diffs) that would
    take a summary's room from what the user asked and the agent concluded; the calls
    themselves are read as tool calls where the format has them (`transcripts`)."""
    if "<" not in text and "```" not in text:
        return text
    cleaned = _RENDERED_TOOLS.sub("", text) if "<" in text else text
    if "```" in cleaned:
        cleaned = _without_empty_fences(cleaned)
    if cleaned == text:
        return text
    return _BLANK_RUNS.sub("\n\n", cleaned).strip()


def _without_empty_fences(text: str) -> str:
    """`text` without its code fences that hold only blank lines."""
    lines = text.split("\n")
    kept: list[str] = []
    opened: int | None = None  # where the open fence is in `kept`
    for line in lines:
        if line.strip().startswith("```"):
            if opened is None:
                opened = len(kept)
            else:
                if all(not row.strip() for row in kept[opened + 1 :]):
                    del kept[opened:]
                    opened = None
                    continue
                opened = None
        kept.append(line)
    return "\n".join(kept)


def decisions(prompts: Sequence[str], messages: Sequence[str]) -> list[str]:
    """Sentences with decision or causal language, first occurrence of each."""
    found: dict[str, str] = {}
    for text in (*prompts, *messages):
        for sentence in _SENTENCE.split(_FENCE.sub(" ", text) if "```" in text else text):
            sentence = sentence.strip()
            if sentence[:1] in _BULLET_START:
                sentence = _BULLET.sub("", sentence).strip()
            if len(sentence) < 12 or sentence[-1] in "?？" or not _DECISION.search(sentence):
                continue
            letters = sum(ch.isalpha() for ch in sentence)
            if letters < len(sentence) * 0.5:
                continue
            found.setdefault(" ".join(sentence.lower().split()), sentence)
    return list(found.values())


def files_changed(tools: list[ToolCall], roots: Sequence[str]) -> list[tuple[str, list[str]]]:
    seen: dict[str, list[str]] = {}
    for call in tools:
        for path, action in call.files():
            actions = seen.setdefault(_display_path(path, roots), [])
            if action not in actions:
                actions.append(action)
    return list(seen.items())


def commands_run(tools: list[ToolCall]) -> list[tuple[str, ToolCall, int]]:
    """(command, call, times) with consecutive repeats folded."""
    runs: list[tuple[str, ToolCall, int]] = []
    for call in tools:
        command = call.command()
        if command is None:
            continue
        if runs and runs[-1][0] == command and runs[-1][1].failed == call.failed:
            runs[-1] = (command, call, runs[-1][2] + 1)
        else:
            runs.append((command, call, 1))
    return runs


def error_line(output: str) -> str:
    """The line of a tool's output that says what went wrong: its last exception line, else
    the first line that mentions an error, else its first line. Only the first and last 8 KB
    are searched: that is where tools report errors."""
    if len(output) > 16384:
        output = output[:8192] + "\n" + output[-8192:]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    lowered = output.lower()
    if not any(word in lowered for word in _TELLING):
        return lines[0] if lines else ""
    exception = first = None
    for line in lines:
        if _EXCEPTION_LINE.match(line):
            exception = line
        elif first is None:
            low = line.lower()
            if any(word in low for word in _TELLING) and not low.startswith("traceback"):
                first = line
    return exception or first or lines[0]


class _Facts:
    """What the sections are made of, computed once however many times the body is rendered
    (`_grow` renders up to six times): the facts themselves, what each message's tool calls
    did, and each item already on one line."""

    def __init__(self, session: Session, roots: Sequence[str]) -> None:
        self.tools = session.visible_tools()
        self.prompts = [text for text in map(readable, session.prompts) if text]
        self.final = readable(session.final) if session.final else None
        self.steps = [
            (readable(text), [call for call in calls if not call.is_memoryd()])
            for text, calls in session.steps()
        ]
        self.decisions = decisions(
            self.prompts, [*(text for text, _ in self.steps), *filter(None, [self.final])]
        )
        self.files = files_changed(self.tools, roots)
        self.commands = commands_run(self.tools)
        failed = [call for call in self.tools if call.failed]
        head, _, tail = _head_tail(failed, 40)
        self.errors: dict[str, None] = {}
        for call in (*head, *tail):
            detail = error_line(call.output) or (
                f"exit {call.exit_code}" if call.exit_code else "failed"
            )
            self.errors.setdefault(f"{_label(call, roots)}: {detail}", None)
        for text in session.errors:
            self.errors.setdefault(text, None)
        self.failed_count = len(failed) + len(session.errors)
        self.roots = roots
        self._done: dict[int, list[str]] = {}
        self._flat: dict[str, str] = {}

    def work_done(self, step: int) -> list[str]:
        """What the tool calls of message `step` did (`_work_done`), worked out once."""
        done = self._done.get(step)
        if done is None:
            done = self._done[step] = _work_done(self.steps[step][1], self.roots)
        return done

    def flat(self, text: str) -> str:
        """`text` on one line: what `_one_line` makes of a text no longer than its limit."""
        line = self._flat.get(text)
        if line is None:
            line = self._flat[text] = " ".join(text.split())
        return line


def _work_done(calls: list[ToolCall], roots: Sequence[str]) -> list[str]:
    """What tool calls did, compactly: files changed (edited `a.py`) and commands run."""
    done: dict[str, None] = {}
    for call in calls:
        for path, action in call.files():
            done.setdefault(f"{action} `{_display_path(path, roots)}`", None)
        command = call.command()
        if command is not None and command.split()[:1] != ["cd"]:
            failed = " (failed)" if call.failed else ""
            done.setdefault(f"ran `{_one_line(command, 80)}`{failed}", None)
    return list(done)


def _label(call: ToolCall, roots: Sequence[str]) -> str:
    command = call.command()
    if command is not None:
        return f"`{_one_line(command, 120)}`"
    files = call.files()
    if files:
        return f"{call.name} `{_display_path(files[0][0], roots)}`"
    return call.name


class _Writer:
    """Renders the sections at one scale; a smaller scale keeps fewer, shorter items."""

    def __init__(
        self, session: Session, limits: CaptureLimits, facts: _Facts, scale: float
    ) -> None:
        self.session = session
        self.limits = limits
        self.facts = facts
        self.scale = scale
        self.high_entropy = limits.redact_high_entropy

    def n(self, value: int) -> int:
        return max(1, int(value * self.scale))

    def excerpt(self, text: str, head: int, tail: int) -> str:
        """Head and tail of `text`; the skipped middle's headings are kept in its marker."""
        text = text.strip()
        head, tail = self.n(head), self.n(tail)
        cut = redact_excerpt(text, head, tail, high_entropy=self.high_entropy)
        if cut is text or "#" not in text:
            return cut
        middle = text[head : len(text) - tail]
        if "```" in middle:  # a code comment is no heading
            middle = _FENCE.sub(" ", middle)
        found = [
            " ".join(match.group(1).replace("*", "").split()) for match in _HEADING.finditer(middle)
        ]
        outline = " · ".join(dict.fromkeys(line for line in found if line))
        if not outline:
            return cut
        outline = _one_line(outline, self.n(300), high_entropy=self.high_entropy)
        return cut.replace(" characters skipped] …", f" characters skipped: {outline}] …", 1)

    def line(self, text: str, limit: int) -> str:
        limit = self.n(limit)
        if len(text) <= limit:  # whole at this scale and every larger one
            return self.facts.flat(text)
        return _one_line(text, limit, high_entropy=self.high_entropy)

    def header(self, agent_name: str) -> str:
        s = self.session
        parts = [f"**{agent_name}** session `{(s.session_id or '?')[:12]}`"]
        if s.started_at is not None:
            start = f"{s.started_at:%Y-%m-%d %H:%M}"
            last = f"{s.last_at:%Y-%m-%d %H:%M}" if s.last_at else start
            end = "" if last == start else f" → {last[11:] if last[:10] == start[:10] else last}"
            parts.append(f"{start}{end} UTC")
        parts.append(f"{len(s.prompts)} prompt{'s' if len(s.prompts) != 1 else ''}")
        tools = self.facts.tools
        if tools:
            counts = Counter(call.name for call in tools).most_common(5)
            detail = ", ".join(f"{self.line(name, 40)} {count}" for name, count in counts)
            parts.append(f"{len(tools)} tool call{'s' if len(tools) != 1 else ''} ({detail})")
        if s.git_branch:
            parts.append(f"branch `{self.line(s.git_branch, 80)}`")
        if s.model:
            parts.append(f"model `{self.line(s.model, 80)}`")
        if s.skipped_bytes:
            parts.append(f"{s.skipped_bytes:,} bytes of the transcript's middle not read")
        return " · ".join(parts)

    def asked(self) -> list[str]:
        head, skipped, tail = _head_tail(self.facts.prompts, self.n(8))
        rows = [self.excerpt(p, 600, 200).replace("\n", "\n  ") for p in head]
        if skipped:
            rows.append(f"… {skipped} more prompts …")
        rows += [self.excerpt(p, 600, 200).replace("\n", "\n  ") for p in tail]
        return [f"- {row}" for row in rows]

    def decided(self) -> list[str]:
        return _bullets(self.facts.decisions, self.n(12), "sentences", lambda d: self.line(d, 300))

    def files(self) -> list[str]:
        def row(item: tuple[str, list[str]]) -> str:
            return f"`{self.line(item[0], 200)}` ({', '.join(item[1])})"

        return _bullets(self.facts.files, self.n(40), "files", row)

    def commands(self) -> list[str]:
        def row(item: tuple[str, ToolCall, int]) -> str:
            command, call, times = item
            row = f"`{self.line(command, 200)}`" + (f" ×{times}" if times > 1 else "")
            if call.failed:
                row += " — failed" + (f" (exit {call.exit_code})" if call.exit_code else "")
            return row

        return _bullets(self.facts.commands, self.n(25), "commands", row)

    def errors(self) -> list[str]:
        width = self.limits.max_tool_output_chars
        rows = list(self.facts.errors)
        shown = _bullets(rows, self.n(10), "errors", lambda row: self.line(row, width + 130))
        unlisted = self.facts.failed_count - len(self.facts.errors)
        if unlisted > 0 and len(rows) <= self.n(10):
            shown.append(f"- … and {unlisted} more failing calls")
        return shown

    def steps(self) -> list[str]:
        """The agent's messages before its last, each with what its tool calls did."""
        head, skipped, tail = _head_tail(list(range(len(self.facts.steps))), self.n(30))
        rows = [self.step(index) for index in head]
        if skipped:
            rows.append(f"… {skipped} more messages …")
        rows += [self.step(index) for index in tail]
        return [f"- {row}" for row in rows]

    def step(self, index: int) -> str:
        row = self.excerpt(self.facts.steps[index][0], 700, 300).replace("\n", "\n  ")
        done = self.facts.work_done(index)
        if done:
            shown = [self.line(item, 100) for item in done[:4]]
            more = f" +{len(done) - 4} more" if len(done) > 4 else ""
            row += f"\n  → {'; '.join(shown)}{more}"
        return row

    def body(self, agent_name: str) -> str:
        s = self.session
        final = self.facts.final
        sections: list[tuple[str, Callable[[], list[str]]]] = [
            ("Notes", lambda: [self.excerpt(n, 6000, 2000) for n in s.notes]),
            ("Asked", self.asked),
            ("Decided / concluded", self.decided),
            ("Files changed", self.files),
            ("Commands run", self.commands),
            ("Errors", self.errors),
            (
                "Earlier in the session",
                lambda: [self.excerpt(s.compactions[-1], 1500, 300)] if s.compactions else [],
            ),
            ("Along the way", self.steps),
            ("Final answer", lambda: [self.excerpt(final, 2500, 500)] if final else []),
        ]
        parts = [self.header(agent_name)]
        for heading, render in sections:
            lines = render()
            if lines:
                parts.append(f"## {heading}\n" + "\n".join(lines))
        return "\n\n".join(parts)


def _fit(body: str, max_bytes: int) -> str:
    data = body.encode("utf-8")
    if len(data) <= max_bytes:
        return body
    note = f"\n\n… (summary cut at {max_bytes:,} bytes)"
    cut = data[: max(0, max_bytes - len(note.encode("utf-8")) - 64)].decode("utf-8", "ignore")
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    return cut + note


_MAX_SCALE = 64.0
"""Past this, every part of any session a body can hold is whole (a 700-character excerpt
becomes 45 KB, beyond the largest `max_body_bytes` worth keeping in one memory)."""


def _grow(render: Callable[[float], str], fits: Callable[[str], bool], body: str) -> str:
    """The body at about the largest scale >= 1 that still fits: a session with room to
    spare keeps its messages whole rather than their head and tail. Whole first (most
    sessions fit whole), else four halvings of the scale's range, in ratio."""
    whole = render(_MAX_SCALE)
    if whole == body or fits(whole):
        return whole
    low, high = 1.0, _MAX_SCALE
    for _ in range(4):
        middle = (low * high) ** 0.5
        candidate = render(middle)
        if fits(candidate):
            low, body = middle, candidate
        else:
            high = middle
    return body


TITLE_CHARS = 90
"""A captured session's title: the first line of its opening request, at most this long."""


def title_of(session: Session, agent_name: str, explicit: str | None = None) -> str:
    raw = explicit or session.title_hint or next(iter(session.prompts), "") or session.final or ""
    line = next((ln for ln in raw.splitlines() if ln.strip()), "")
    line = _one_line(line.strip().lstrip("#").strip(), TITLE_CHARS)
    if not line:
        when = f" {session.started_at:%Y-%m-%d}" if session.started_at else ""
        line = f"{agent_name} session{when}"
    return redact(line)


def keywords(session: Session, roots: Sequence[str]) -> tuple[list[str], list[str]]:
    """Tags (agent, file types) and triggers (file names, commands, tools) for recall."""
    tools = session.visible_tools()
    paths = [path for path, _ in files_changed(tools, roots)]
    suffixes = Counter(
        PurePosixPath(p).suffix.lstrip(".").lower() for p in paths if PurePosixPath(p).suffix
    )
    tags = ["session", session.agent, *(ext for ext, _ in suffixes.most_common(6))]
    heads: Counter[str] = Counter()
    for command, _, _ in commands_run(tools):
        words = command.split()
        if words and words[0] not in _BORING_COMMANDS:
            heads[PurePosixPath(words[0]).name] += 1
    names = Counter(
        call.name for call in tools if call.kind == "other" and not call.name.startswith("mcp__")
    )
    triggers = [
        *(PurePosixPath(p).name for p in paths[:8]),
        *(head for head, _ in heads.most_common(6)),
        *(name for name, _ in names.most_common(4)),
    ]
    clean = [redact(t) for t in triggers if t and len(t) <= 80]
    return [redact(t) for t in tags], clean


def summarize(
    session: Session,
    limits: CaptureLimits,
    *,
    agent_name: str,
    roots: Sequence[str],
    title: str | None = None,
) -> Summary:
    """Title, capped and redacted body, tags and triggers of a session.

    Parts are redacted before they are cut (`redact_excerpt`, `safe_cut`) and the whole body
    once more at the end, so no secret survives whole or in part.
    """
    facts = _Facts(session, roots)
    high_entropy = limits.redact_high_entropy

    def render(scale: float) -> str:  # cut parts are redacted, the whole body once at the end
        return _Writer(session, limits, facts, scale).body(agent_name)

    def fits(body: str) -> bool:
        return len(body.encode("utf-8")) <= limits.max_body_bytes

    scale = 1.0
    body = render(scale)
    if fits(body):
        body = _grow(render, fits, body)
    else:
        while not fits(body) and scale >= 0.05:
            scale *= 0.6
            body = render(scale)
    body = redact(body, high_entropy=high_entropy)
    cut = _fit(body, limits.max_body_bytes)
    if cut is not body:  # redacting a redacted text changes nothing (`redact`): only a cut one
        body = redact(cut, high_entropy=high_entropy)
    tags, triggers = keywords(session, roots)
    return Summary(
        title=title_of(session, agent_name, title), body=body, tags=tags, triggers=triggers
    )
