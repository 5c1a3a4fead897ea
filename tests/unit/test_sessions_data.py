"""The real-session development set (`tests/data/sessions`) and the bench's SpecStory reader."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
DATA = Path(__file__).resolve().parents[1] / "data" / "sessions"


@pytest.fixture(scope="module")
def sessions_bench() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("sessions")
    finally:
        sys.path.remove(str(BENCH))


def test_every_project_has_enough_questions_and_each_names_a_stored_session(
    sessions_bench: ModuleType,
) -> None:
    sessions, questions = sessions_bench.load(DATA)
    assert len(sessions) >= 3
    assert all(len(group) >= 15 for group in questions.values())
    every = [q for group in questions.values() for q in group]
    assert len(every) >= 60
    assert sum(1 for q in every if q.get("stale")) >= 3
    assert sum(1 for q in every if not q["expected"]) >= 3
    for project, group in sessions.items():
        assert (DATA / project / ".specstory" / "history").is_dir()
        assert all(s.turns and s.turns[0][0] == "user" for s in group), project


def test_a_specstory_file_reads_as_its_turns_title_and_start(sessions_bench: ModuleType) -> None:
    path = (
        DATA
        / "ThatHunky__gryag"
        / ".specstory"
        / "history"
        / "2025-10-02_06-45Z-fixing-json-parsing-error-in-environment-variable.md"
    )
    session = sessions_bench.parse_session("ThatHunky__gryag", path)
    assert session.title == "Fixing JSON parsing error in environment variable"
    assert session.started == datetime(2025, 10, 2, 6, 45, tzinfo=UTC)
    assert [role for role, _, _ in session.turns] == ["user", "assistant"]
    assert session.turns[0][1] == "#terminalSelection fix this"
    assert session.turns[0][2] == datetime(2025, 10, 2, 6, 48, tzinfo=UTC)
    assert session.turns[1][1].endswith("The bot is now running successfully! 🎉")
    assert session.text == path.read_bytes().decode("utf-8")


def test_sessions_stored_with_crlf_keep_their_line_ends() -> None:
    path = (
        DATA
        / "ThatHunky__gryag"
        / ".specstory"
        / "history"
        / "2025-10-19_20-10Z-image-editing-functionality-improvements.md"
    )
    raw = path.read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n") > 100
