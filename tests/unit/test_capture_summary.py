"""The summary of a long session: the capture hook renders it at several scales to fill its
budget (`summary._grow`), so what does not depend on the scale is worked out once, and the
body is redacted whole once; the body stays what a render from scratch makes."""

from __future__ import annotations

import pytest

from memoryd.capture_limits import CaptureLimits
from memoryd.redact import redact
from memoryd.sessions import summary
from memoryd.sessions.session import Session, ToolCall

ROOTS = ["/src/shop"]


def long_session(messages: int = 10) -> Session:
    """A session too long to keep whole in 16 KB, with room to keep more than its heads and
    tails: so the body is grown by halving the scale's range."""
    session = Session("claude-code", "sess-long")
    for n in range(messages):
        session.add_prompt(f"Step {n}: make module_{n} pass its tests. " + "context " * 40)
        session.add_assistant(
            f"Module {n} failed because the import order was wrong; we decided to move "
            f"`helpers_{n}` below the settings import. " + f"Detail {n} of the change. " * 100
        )
        session.tools.append(ToolCall("Bash", {"command": f"pytest tests/test_module_{n}.py"}))
        session.tools.append(ToolCall("Edit", {"file_path": f"/src/shop/app/module_{n}.py"}))
        if n % 7 == 0:
            session.tools.append(
                ToolCall("Bash", {"command": f"make lint-{n}"}, "E501 line too long", error=True)
            )
    session.final = "All modules pass: the import order was the cause everywhere."
    return session


def test_a_grown_body_is_redacted_whole_once_and_each_messages_tool_work_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = long_session()
    limits = CaptureLimits()
    renders: list[float] = []
    render = summary._Writer.body

    def counted_render(writer: summary._Writer, agent_name: str) -> str:
        renders.append(writer.scale)
        return render(writer, agent_name)

    redacted: list[int] = []

    def counted_redact(text: str, *, high_entropy: bool = True) -> str:
        redacted.append(len(text))
        return redact(text, high_entropy=high_entropy)

    work: list[int] = []
    work_done = summary._work_done

    def counted_work_done(calls: list[ToolCall], roots: list[str]) -> list[str]:
        work.append(len(calls))
        return work_done(calls, roots)

    monkeypatch.setattr(summary._Writer, "body", counted_render)
    monkeypatch.setattr(summary, "redact", counted_redact)
    monkeypatch.setattr(summary, "_work_done", counted_work_done)
    body = summary.summarize(session, limits, agent_name="Claude Code", roots=ROOTS).body

    assert summary._MAX_SCALE in renders  # whole did not fit: grown by halvings
    assert len(renders) > 2
    assert 12_000 < len(body.encode("utf-8")) <= limits.max_body_bytes
    assert [size for size in redacted if size > 1000] == [len(body)]
    assert len(work) <= len(session.steps())


@pytest.mark.parametrize("budget", [2048, 16_384])
def test_a_body_rendered_after_other_scales_equals_one_rendered_from_scratch(budget: int) -> None:
    """What the renders share (each message's tool work, items on one line) holds nothing
    of the scale it was first made at."""
    session = long_session()
    limits = CaptureLimits()._replace(max_body_bytes=budget)
    shared = summary._Facts(session, ROOTS)
    for scale in (1.0, 64.0, 8.0, 2.8, 0.6, 0.36, 0.05, 3.0):
        again = summary._Writer(session, limits, shared, scale).body("Claude Code")
        fresh = summary._Facts(session, ROOTS)
        assert again == summary._Writer(session, limits, fresh, scale).body("Claude Code")


def test_a_line_that_fits_is_what_one_line_makes_of_it() -> None:
    facts = summary._Facts(long_session(3), ROOTS)
    writer = summary._Writer(long_session(3), CaptureLimits(), facts, 1.0)
    for text in ("a  b\n\tc", "x" * 300, " padded  text ", "tab\there", "é  ü " * 50):
        assert writer.line(text, 300) == summary._one_line(text, 300)
