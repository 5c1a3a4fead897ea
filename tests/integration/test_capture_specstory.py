"""SpecStory histories (`.specstory/history/*.md`) through `memoryd capture`, on the real
session files that public projects committed (tests/data/sessions/, SOURCES.md there); and the
summary keeping a session's middle when the body has room for it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from memoryd.capture.specstory import SpecStoryUnreadable, read_specstory
from memoryd.capture.transcripts import sniff
from memoryd.scope import resolve_scope
from memoryd.sessions.summary import readable
from tests.integration.test_capture import (
    ClaudeTranscript,
    capture,
    only_memory,
    section,
)

SESSIONS = Path(__file__).resolve().parents[1] / "data" / "sessions"
CURSOR = (
    SESSIONS
    / "octoplorer__octopulse/.specstory/history/2025-12-12_19-03Z-nuxt-three-section-layout.md"
)
COPILOT = (
    SESSIONS
    / "ThatHunky__gryag/.specstory/history"
    / "2025-10-02_06-45Z-fixing-json-parsing-error-in-environment-variable.md"
)
MB = 32 * 1024 * 1024


@pytest.fixture(autouse=True)
def _no_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_CAPTURE__BUDGET_MS", "0")


def test_every_real_history_is_sniffed_and_read() -> None:
    files = sorted(SESSIONS.glob("*/.specstory/history/*.md"))
    assert len(files) == 43
    for path in files:
        assert sniff(path) == "specstory", path
        session = read_specstory(path, "specstory", MB)
        assert session.prompts, path
        assert session.title_hint, path
        assert session.started_at is not None, path


def test_a_cursor_history_reads_its_tool_use_blocks_as_tool_calls() -> None:
    session = read_specstory(CURSOR, "specstory", MB)
    assert session.session_id == "eda86dce-8ba2-42c0-8251-ef975fb37bbb"
    assert session.title_hint == "Nuxt three-section layout"
    assert session.prompts[0].startswith("Use context7 to find out how to add layouts in Nuxt")
    files = [path for call in session.tools for path, _ in call.files()]
    assert files == [
        "/Volumes/External/Projects/nuxt-pulse/app/layouts/default.vue",
        "/Volumes/External/Projects/nuxt-pulse/app/app.vue",
    ]
    assert {call.name for call in session.tools} >= {"read_file", "write", "search_replace"}
    assert not any("<tool-use" in text for text in session.assistant)
    assert session.final is not None
    assert "Wrapped `<NuxtPage />` with `<NuxtLayout />`" in session.final


def test_a_copilot_history_reads_its_turns_and_model() -> None:
    session = read_specstory(COPILOT, "specstory", MB)
    assert session.session_id
    assert session.model is not None
    assert session.model.startswith("copilot/")
    assert len(session.prompts) >= 1
    assert "ADMIN_USER_IDS" in "\n".join(session.prompts + session.assistant)


def test_a_file_that_is_no_history_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\n_**User**_\n\nhello\n", encoding="utf-8")
    assert sniff(path) is None
    with pytest.raises(SpecStoryUnreadable, match="not a SpecStory history"):
        read_specstory(path, "specstory", MB)


def test_capture_source_specstory_writes_one_memory_in_the_files_project(
    home: Path, project: Path
) -> None:
    history = project / ".specstory" / "history"
    history.mkdir(parents=True)
    path = history / CURSOR.name
    shutil.copyfile(CURSOR, path)
    capture(home, "specstory", None, str(path))
    memory = only_memory(home)
    assert memory.meta.title == "Nuxt three-section layout"
    assert memory.meta.scope_hash == resolve_scope(project).scope_hash
    assert memory.meta.created_at.year == 2025
    body = memory.body
    assert "app/app.vue` (edited)" in section(body, "Files changed")
    assert "<tool-use" not in body
    assert "<details" not in body
    assert "Wrapped `<NuxtPage />` with `<NuxtLayout />`" in body.split("## Final answer")[1]
    capture(home, "specstory", None, str(path))  # again: the same memory, not a second one
    assert only_memory(home).slug == memory.slug


def test_manual_capture_sniffs_a_specstory_file(home: Path, project: Path) -> None:
    capture(home, "manual", {"transcript_path": str(COPILOT), "cwd": str(project)})
    memory = only_memory(home)
    assert "ADMIN_USER_IDS" in memory.body


def test_readable_drops_rendered_tool_calls_and_empty_fences() -> None:
    text = (
        "Reading the config.\n\n---\n\n"
        '<tool-use data-tool-name="read_file">\n<details><summary>Read file</summary>\n'
        "BULK FILE CONTENT\n</details>\n</tool-use>\n\n---\n\n"
        "Now the fix:\n```\n\n```\nKept:\n```py\nx = 1\n```\n"
    )
    cleaned = readable(text)
    assert "BULK FILE CONTENT" not in cleaned
    assert "tool-use" not in cleaned
    assert cleaned.startswith("Reading the config.\n\nNow the fix:\nKept:\n```py\nx = 1\n```")
    assert readable("plain text, nothing rendered") == "plain text, nothing rendered"


def test_a_session_with_room_keeps_the_middle_of_its_long_messages(
    home: Path, project: Path, tmp_path: Path
) -> None:
    """A 9 KB final answer in a 16 KB body: kept whole, not its head and tail (the middle is
    where a long answer lists what it built: on the real sessions this lost the answers)."""
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-room", str(project))
    transcript.prompt("Implement logging for the tools.")
    transcript.say("I'll add a logging framework.")
    filler = "The framework records every call in detail. " * 90
    transcript.say(f"Done.\n{filler}\nMIDDLE-DETAIL: the @log_tool_execution decorator.\n{filler}")
    capture(home, "claude-code", transcript.payload())
    body = only_memory(home).body
    assert "MIDDLE-DETAIL" in section(body, "Final answer")
    assert "characters skipped" not in body
    assert len(body.encode("utf-8")) <= 16_384


def test_a_cut_message_keeps_the_headings_of_its_middle(
    home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long answer that must be cut keeps its head and tail, and the headings of what was
    skipped name what the middle was about."""
    monkeypatch.setenv("MEMORYD_CAPTURE__MAX_BODY_BYTES", "4096")
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-outline", str(project))
    transcript.prompt("Implement logging for the tools.")
    filler = "The framework records every call in detail. " * 150
    transcript.say(
        f"Done.\n{filler}\n#### **3. Decorator Framework**\n{filler}\n"
        f"```python\n# not a heading: a comment\n```\n{filler}\nThat is all."
    )
    capture(home, "claude-code", transcript.payload())
    final = only_memory(home).body.split("## Final answer")[1]
    assert "characters skipped: 3. Decorator Framework]" in final
    assert "not a heading" not in final
    assert final.rstrip().endswith("That is all.")


def test_a_history_past_max_bytes_keeps_its_start_and_end(tmp_path: Path) -> None:
    text = CURSOR.read_text(encoding="utf-8")
    middle = "\n\n".join(f"_**User**_\n\nfiller prompt {n}\n\n---" for n in range(3000))
    path = tmp_path / "long.md"
    cut = text.index("_**Agent")
    path.write_text(text[:cut] + middle + "\n\n" + text[cut:], encoding="utf-8")
    session = read_specstory(path, "specstory", 65536)
    assert session.skipped_bytes == path.stat().st_size - 65536
    assert session.title_hint == "Nuxt three-section layout"
    assert session.final is not None
    assert "Wrapped `<NuxtPage />` with `<NuxtLayout />`" in session.final
