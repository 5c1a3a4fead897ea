"""Trends arithmetic and the supersede report's grouping and markdown, on plain rows with a
fixed clock (the stores are exercised in tests/integration/test_trends.py)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from memoryd.errors import InvalidInput
from memoryd.governance.reports import (
    NO_ENTITY,
    EntityChain,
    SupersedeReport,
    group,
    render_markdown,
)
from memoryd.governance.store import TriggerStat
from memoryd.governance.trends import (
    HotRecall,
    Mention,
    SupersedeEvent,
    Window,
    compute,
)

NOW = datetime(2026, 5, 20, 15, 30, tzinfo=UTC)
DAY = timedelta(days=1)
REACT = ("entity:library:React", "React", "library")
SOLID = ("entity:library:Solid", "Solid", "library")
UV = ("entity:tool:uv", "uv", "tool")


def mention(entity: tuple[str, str, str], at: datetime) -> Mention:
    """One memory created at `at` that mentions `entity`."""
    return Mention(*entity, day=at.date())


def event(newer: str, older: str, at: datetime | None, **extra: object) -> SupersedeEvent:
    fields: dict[str, object] = {
        "newer": newer,
        "newer_title": newer.title(),
        "older": older,
        "older_title": older.title(),
        "decided_at": at,
        "decided_by": "auto",
        "confidence": 0.95,
        "status": "active",
        **extra,
    }
    return SupersedeEvent.model_validate(fields)


def test_the_window_is_whole_utc_days_ending_today_and_the_previous_one_as_long() -> None:
    w = Window.ending(NOW, 7)
    assert w.start == datetime(2026, 5, 14, tzinfo=UTC)
    assert w.end == datetime(2026, 5, 21, tzinfo=UTC)
    assert w.previous_start == datetime(2026, 5, 7, tzinfo=UTC)
    assert w.day_list() == [date(2026, 5, 14) + i * DAY for i in range(7)]
    assert Window.ending(NOW, 1).day_list() == [date(2026, 5, 20)]


@pytest.mark.parametrize("days", [0, -3, 367])
def test_a_window_outside_one_to_366_days_is_refused(days: int) -> None:
    with pytest.raises(InvalidInput, match=f"days must be between 1 and 366 \\(got {days}\\)"):
        Window.ending(NOW, days)


def test_rising_entities_compare_this_window_with_the_previous_one() -> None:
    w = Window.ending(NOW, 7)
    mentions = [
        # Solid: 3 now, 0 before → +3
        *(mention(SOLID, NOW - n * DAY) for n in (0, 1, 1)),
        # React: 2 now, 4 before → falling, not rising
        *(mention(REACT, NOW - n * DAY) for n in (2, 3, 8, 9, 10, 12)),
        # uv: 2 now, 1 before → +1
        mention(UV, NOW - 6 * DAY),
        mention(UV, w.start),  # the first instant of the window is in it
        mention(UV, w.start - timedelta(seconds=1)),  # the last of the previous one
        mention(UV, w.previous_start - DAY),  # before both windows: ignored
        Mention(*UV, day=w.end.date(), count=5),  # after the window (a clock set back)
    ]
    t = compute(w, mentions=mentions, triggers=[], supersedes=[], recalls=[])
    assert [(e.name, e.mentions, e.previous) for e in t.rising_entities] == [
        ("Solid", 3, 0),
        ("uv", 2, 1),
    ]
    # the chart: the most mentioned in the window, per day, aligned with `days`
    assert [s.name for s in t.mentions] == ["Solid", "React", "uv"]
    solid = t.mentions[0]
    assert solid.counts == [0, 0, 0, 0, 0, 2, 1]
    assert [s.counts for s in t.mentions[1:]] == [[0, 0, 0, 1, 1, 0, 0], [2, 0, 0, 0, 0, 0, 0]]
    assert sum(sum(s.counts) for s in t.mentions) == 7


def test_top_triggers_sum_the_windows_days_and_show_the_previous_window() -> None:
    w = Window.ending(NOW, 7)

    def stat(trigger: str, day: date, hits: int, scope: str = "aaaaaaaaaaaa") -> TriggerStat:
        return TriggerStat(trigger=trigger, scope_hash=scope, day=day, hits=hits)

    today = NOW.date()
    stats = [
        stat("postgres", today, 2),
        stat("postgres", today - 3 * DAY, 3, scope="bbbbbbbbbbbb"),
        stat("postgres", today - 8 * DAY, 4),
        stat("deploy", today - 6 * DAY, 9),
        stat("deploy", today - 7 * DAY, 1),  # the previous window's last day
        stat("lint", today - 20 * DAY, 50),  # before both windows
        stat("future", today + DAY, 70),  # after the window (a clock set back)
    ]
    t = compute(w, mentions=[], triggers=stats, supersedes=[], recalls=[])
    assert [(r.trigger, r.hits, r.previous) for r in t.top_triggers] == [
        ("deploy", 9, 1),
        ("postgres", 5, 4),
    ]


def test_recent_supersedes_and_hot_recalls_are_those_of_the_window() -> None:
    w = Window.ending(NOW, 7)
    supersedes = [
        event("solid", "react", NOW - DAY),
        event("pnpm", "npm", NOW - 2 * DAY, decided_by="user", status="candidate"),
        event("old", "older", NOW - 9 * DAY),
        event("undated", "x", None),
    ]
    recalls = [
        HotRecall(
            slug=f"m{n}",
            title=f"memory {n}",
            type="decision",
            scope_hash="aaaaaaaaaaaa",
            recall_count=count,
            last_recalled_at=at,
        )
        for n, (count, at) in enumerate([(5, NOW), (9, NOW - 2 * DAY), (99, NOW - 30 * DAY)])
    ]
    t = compute(w, mentions=[], triggers=[], supersedes=supersedes, recalls=recalls)
    assert [(s.newer, s.status) for s in t.recent_supersedes] == [
        ("solid", "active"),
        ("pnpm", "candidate"),
    ]
    assert [(r.slug, r.recall_count) for r in t.hot_recalls] == [("m1", 9), ("m0", 5)]


def test_an_empty_window_has_empty_sections_but_its_days() -> None:
    t = compute(Window.ending(NOW, 3), mentions=[], triggers=[], supersedes=[], recalls=[])
    assert (t.top_triggers, t.rising_entities, t.recent_supersedes, t.hot_recalls) == (
        [],
        [],
        [],
        [],
    )
    assert t.mentions == []
    assert t.days == [date(2026, 5, 18), date(2026, 5, 19), date(2026, 5, 20)]


def test_a_decision_belongs_to_its_entity_else_to_the_entities_both_memories_mention() -> None:
    judged = event("solid", "react", NOW - DAY, entity_id=REACT[0])
    by_hand = event("pnpm", "npm", NOW - 3 * DAY, decided_by="user", confidence=1.0)
    unrelated = event("b", "a", NOW - 2 * DAY, decided_by="user")
    later = event("svelte", "solid", NOW, entity_id=REACT[0])
    mentions = {
        "pnpm": {UV[0], "entity:tool:pnpm"},
        "npm": {UV[0], "entity:tool:npm"},
        "a": {"entity:tool:x"},
        "b": {"entity:tool:y"},
    }
    # by hand, the older memory's title naming one of the shared entities: that one only
    titled = event(
        "vite",
        "webpack",
        NOW - 4 * DAY,
        older_title="All frontends are bundled with Webpack",
        decided_by="user",
    )
    mentions |= {
        "vite": {"entity:tool:Webpack", "entity:library:React", "entity:tool:Vite"},
        "webpack": {"entity:tool:Webpack", "entity:library:React"},
    }
    names = {"entity:tool:Webpack": "Webpack", REACT[0]: "React", UV[0]: "uv"}
    groups = group([later, judged, by_hand, unrelated, titled], mentions, names)
    assert {k: [(d.newer, d.older) for d in v] for k, v in groups.items()} == {
        REACT[0]: [("solid", "react"), ("svelte", "solid")],  # oldest first
        UV[0]: [("pnpm", "npm")],  # the title ("Npm") names no shared entity: all shared
        None: [("b", "a")],
        "entity:tool:Webpack": [("vite", "webpack")],
    }


def test_the_markdown_report_names_what_replaced_what_when_by_whom_and_why() -> None:
    judged = event(
        "solid",
        "react",
        NOW - DAY,
        entity_id=REACT[0],
        reason="rule switch-from-to: React → Solid",
        judge="rule:switch-from-to",
    )
    report = SupersedeReport(
        generated_at=NOW,
        since=NOW - 10 * DAY,
        decisions=2,
        chains=[
            EntityChain(entity_id=REACT[0], name="React", type="library", decisions=[judged]),
            EntityChain(
                entity_id=None,
                name=NO_ENTITY,
                decisions=[
                    event("b*", "a_", NOW - 2 * DAY, decided_by="digest", status="candidate")
                ],
            ),
        ],
    )
    text = render_markdown(report)
    assert text.splitlines()[:3] == [
        "# Supersede report",
        "",
        "2 decisions about every entity since 2026-05-10T15:30:00Z"
        " (generated 2026-05-20T15:30:00Z).",
    ]
    assert "## React (library)" in text
    assert (
        "- 2026-05-19: **Solid** (`solid`) replaced **React** (`react`); decided by auto,"
        " confidence 0.95, rule:switch-from-to: rule switch-from-to: React → Solid"
    ) in text
    assert f"## {NO_ENTITY}\n" in text
    assert r"**B\*** (`b*`) may replace (candidate) **A\_** (`a_`); decided by digest" in text
    empty = render_markdown(SupersedeReport(generated_at=NOW, entity=SOLID[0]))
    assert "0 decisions about `entity:library:Solid`" in empty
    assert "No supersede decision was made in that time." in empty
