"""The graph page as a daily tool, in headless chromium against a real daemon on TCP: the home
view, search and filters, the entity view with co-mentions, markdown that cannot inject
script, editing, forgetting, restoring and merging a memory, and the live feed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from memoryd.models import format_ts, utcnow
from tests.conftest import isolate_environment
from tests.daemon_harness import Daemon, free_port, running, uds_client
from tests.e2e.test_crash_recovery import captured_session
from tests.e2e.test_graph_page import (  # noqa: F401  (the browser fixture)
    browser,
    needs_browser,
    open_page,
    wait_for,
)

PG, ADA, ALEMBIC = "entity:tool:PostgreSQL", "entity:person:Ada", "entity:library:Alembic"
HUB_NEIGHBOURS = 24
XSS_BODY = """Probe of the renderer.

<script>window.pwned = 1</script>
<img src="x" onerror="window.pwned = 2">
[click me](javascript:window.pwned=3) and [the docs](https://www.postgresql.org/docs/)

- PostgreSQL keeps the **orders**
- `SELECT 1` works

```sql
SELECT '<b>not bold</b>';
```
"""
SESSION_BODY = """**Asked:** fix the cart total when two discounts stack.

**Found:** the backend rounded each line with `round()`.

**Decided:** carry money as integer cents; PostgreSQL stores `BIGINT`.
"""


@dataclass
class Seeded:
    daemon: Daemon
    project: Path
    other: Path
    slugs: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.daemon.port}/#token={self.daemon.token()}"


def day(n: int) -> str:
    return f"2026-11-{n:02d}T10:00:00Z"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    root = tmp_path_factory.mktemp("home-page")
    project, other = root / "webshop", root / "other"
    project.mkdir()
    other.mkdir()
    with pytest.MonkeyPatch.context() as env:
        isolate_environment(env, root)
        env.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
        with running(root / "home", free_port()) as daemon, uds_client(daemon.home) as http:
            slugs: dict[str, str] = {}

            def fact(key: str, scope: Path, entities: list[str], **memory: Any) -> None:
                relations = memory.pop("relations", [])
                payload = {
                    "memory": {"type": "fact", "scope": str(scope), **memory},
                    "entity_ids": entities,
                    "relations": [
                        {"subject": s, "predicate": p, "object": o} for s, p, o in relations
                    ],
                }
                response = http.post("/v1/graph/facts", json=payload)
                assert response.status_code == 201, response.text
                slugs[key] = response.json()["meta"]["slug"]

            fact(
                "other",
                other,
                [],
                title="A note in another project",
                body="Elsewhere.",
                created_at=day(1),
            )
            for i in range(HUB_NEIGHBOURS):
                fact(
                    f"hub{i}",
                    project,
                    [PG, f"entity:tool:Tool{i:02d}"],
                    title=f"PostgreSQL and Tool{i:02d}",
                    body=f"Tool{i:02d} talks to it.",
                    created_at=day(2),
                )
            fact(
                "cents",
                project,
                [PG, ADA],
                type="decision",
                title="Store money as integer cents",
                body="Ada decided: all amounts are integer cents in PostgreSQL.",
                tags=["money"],
                created_at=day(10),
            )
            fact(
                "enum",
                project,
                [PG, ALEMBIC],
                type="warning",
                title="ALTER TYPE needs an autocommit block",
                body="Alembic runs each migration in a transaction.",
                relations=[(ALEMBIC, "uses", PG)],
                created_at=day(12),
            )
            fact("probe", project, [PG], title="Renderer probe", body=XSS_BODY, created_at=day(20))
            fact(
                "session",
                project,
                [PG],
                type="session",
                title="Session: cart rounding",
                body=SESSION_BODY,
                created_at=day(25),
            )
            fact(
                "dup",
                project,
                [PG, ADA],
                type="decision",
                title="Money in cents (again)",
                body="Amounts are integer cents.",
                tags=["dup"],
                created_at=day(26),
            )
            yield Seeded(daemon, project, other, slugs)


def home_rows(driver: webdriver.Chrome) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = driver.execute_script(
        "return [...document.querySelectorAll('#home-list li[data-slug]')].map(li => ({"
        " slug: li.dataset.slug, state: li.dataset.state, fresh: li.classList.contains('fresh'),"
        " title: li.querySelector('.title').textContent}))"
    )
    return rows


def loaded(driver: webdriver.Chrome, what: str, check: Any) -> list[dict[str, str]]:
    return wait_for(what, lambda: (rows := home_rows(driver)) and check(rows) and rows)


def severe(driver: webdriver.Chrome) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@needs_browser
def test_home_lists_the_project_newest_first_and_switches_projects(
    seeded: Seeded,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    browser.get_log("browser")
    open_page(browser, seeded.url)
    rows = loaded(browser, "the home list", lambda rows: len(rows) == 29)
    assert [r["title"] for r in rows[:5]] == [
        "Money in cents (again)",
        "Session: cart rounding",
        "Renderer probe",
        "ALTER TYPE needs an autocommit block",
        "Store money as integer cents",
    ]
    project = Select(browser.find_element(By.ID, "project"))
    assert project.first_selected_option.text == "webshop (29)"  # the newest project
    assert "29 of 29 memories" in browser.find_element(By.ID, "home-summary").text
    assert browser.find_element(By.ID, "feed-status").get_attribute("data-state") == "live"

    project.select_by_visible_text("other (1)")
    loaded(
        browser,
        "the other project",
        lambda rows: [r["slug"] for r in rows] == [seeded.slugs["other"]],
    )
    assert browser.execute_script("return localStorage.getItem('memoryd.project')")
    open_page(browser, seeded.url)  # the choice is kept
    loaded(browser, "the kept project", lambda rows: len(rows) == 1)
    Select(browser.find_element(By.ID, "project")).select_by_visible_text("All projects")
    loaded(browser, "every project", lambda rows: len(rows) == 30)

    # keyboard: j moves down the list, Enter opens, Esc closes, d switches the theme
    browser.find_element(By.TAG_NAME, "body").send_keys("j")
    browser.switch_to.active_element.send_keys("j")
    focused = browser.switch_to.active_element
    assert focused.get_attribute("data-slug") == seeded.slugs["session"]
    focused.send_keys(Keys.ENTER)
    panel = browser.find_element(By.ID, "memory")
    wait_for(
        "the opened memory", lambda: panel.get_attribute("data-slug") == seeded.slugs["session"]
    )
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait_for("the closed panel", lambda: not panel.is_displayed())
    theme = browser.execute_script("return document.documentElement.dataset.theme")
    browser.find_element(By.TAG_NAME, "body").send_keys("d")
    flipped = {"light": "dark", "dark": "light"}[theme]
    assert browser.execute_script("return document.documentElement.dataset.theme") == flipped
    background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert background == ("rgb(20, 23, 30)" if flipped == "dark" else "rgb(247, 248, 250)")
    open_page(browser, seeded.url)  # the theme is kept
    assert browser.execute_script("return document.documentElement.dataset.theme") == flipped
    browser.execute_script("localStorage.clear()")
    assert severe(browser) == []


@needs_browser
def test_search_and_filters(seeded: Seeded, browser: webdriver.Chrome) -> None:  # noqa: F811
    open_page(browser, seeded.url)
    loaded(browser, "the home list", lambda rows: len(rows) == 29)
    box = browser.find_element(By.ID, "search")
    box.send_keys("integer cents")
    rows = loaded(browser, "the hits", lambda rows: len(rows) == 3)
    assert {r["slug"] for r in rows} == {
        seeded.slugs["cents"],
        seeded.slugs["dup"],
        seeded.slugs["session"],
    }
    assert "3 of 3 hits" in browser.find_element(By.ID, "home-summary").text
    assert browser.find_elements(By.CSS_SELECTOR, "#home-list .snippet")
    # the same box finds entities: PostgreSQL is one click from its graph
    box.clear()
    box.send_keys("postgres")
    wait_for(
        "the entity result",
        lambda: browser.find_elements(By.CSS_SELECTOR, f'#results .result[data-id="{PG}"]'),
    )
    box.clear()
    box.send_keys(Keys.ENTER)

    Select(browser.find_element(By.ID, "filter-type")).select_by_value("decision")
    loaded(
        browser,
        "decisions",
        lambda rows: (
            [r["title"] for r in rows] == ["Money in cents (again)", "Store money as integer cents"]
        ),
    )
    Select(browser.find_element(By.ID, "filter-type")).select_by_value("")
    set_date(browser, "filter-since", "2026-11-11")
    set_date(browser, "filter-until", "2026-11-21")
    loaded(
        browser,
        "the date window",
        lambda rows: (
            [r["title"] for r in rows] == ["Renderer probe", "ALTER TYPE needs an autocommit block"]
        ),
    )
    browser.find_element(By.ID, "filters-clear").click()
    loaded(browser, "everything again", lambda rows: len(rows) == 29)
    assert severe(browser) == []


def set_date(driver: webdriver.Chrome, field: str, value: str) -> None:
    """A date input's value, and the change event a user's pick fires."""
    driver.execute_script(
        "const f = document.getElementById(arguments[0]); f.value = arguments[1];"
        " f.dispatchEvent(new Event('change'));",
        field,
        value,
    )


def drawn(
    driver: webdriver.Chrome,
    centre: str,
    until: Callable[[dict[str, Any]], bool] = lambda state: True,
) -> dict[str, Any]:
    """The drawn graph once it is centred on `centre` (and `until` holds)."""

    def state() -> dict[str, Any] | None:
        found: dict[str, Any] | None = driver.execute_script(
            "if (document.getElementById('graph').dataset.centre !== arguments[0]) return null;"
            " const g = window.memorydGraph;"
            " return {nodes: g.nodes().map(n => n.data('label')).sort(),"
            " edges: g.edges().map(e => [e.data('kind'), e.data('source'), e.data('target'),"
            " e.style('line-style')]),"
            " note: document.getElementById('graph-note').textContent};",
            centre,
        )
        return found if found is not None and until(found) else None

    return wait_for(f"the graph of {centre}", state)


@needs_browser
def test_entity_view_draws_co_mentions_and_relations_with_depth_and_cap(
    seeded: Seeded,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    open_page(browser, f"{seeded.url}&entity={ALEMBIC}")
    one = drawn(browser, ALEMBIC)
    assert one["nodes"] == ["Alembic", "PostgreSQL"]
    assert sorted(one["edges"]) == [
        ["co_mention", ALEMBIC, PG, "dashed"],
        ["relation", ALEMBIC, PG, "solid"],
    ]
    assert not browser.find_element(By.ID, "home").is_displayed()

    Select(browser.find_element(By.ID, "graph-depth")).select_by_value("2")
    two = drawn(browser, ALEMBIC, until=lambda state: len(state["nodes"]) > 2)
    # PostgreSQL's 24 tools and Ada: 27 entities fit under the cap of 40
    assert len(two["nodes"]) == 3 + HUB_NEIGHBOURS
    assert "Ada" in two["nodes"]
    assert "left out" not in two["note"]
    Select(browser.find_element(By.ID, "graph-cap")).select_by_value("20")
    capped = drawn(browser, ALEMBIC, until=lambda state: "left out" in state["note"])
    assert len(capped["nodes"]) == 20
    assert "7 more left out by the cap of 20" in capped["note"]

    # a click on a node re-centres; Home goes back to the list
    browser.execute_script("window.memorydGraph.getElementById(arguments[0]).emit('tap')", PG)
    drawn(browser, PG)
    browser.find_element(By.ID, "home-open").click()
    wait_for("the home view", lambda: browser.find_element(By.ID, "home").is_displayed())
    assert severe(browser) == []


@needs_browser
def test_the_entity_views_depth_and_cap_live_in_the_url(
    seeded: Seeded,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    """A reload, or the link shared from the address bar, draws the same neighbourhood: the
    depth and the cap chosen are in the fragment; one the controls do not offer is ignored."""
    open_page(browser, f"{seeded.url}&entity={ALEMBIC}")
    drawn(browser, ALEMBIC)
    Select(browser.find_element(By.ID, "graph-depth")).select_by_value("2")
    drawn(browser, ALEMBIC, until=lambda state: len(state["nodes"]) > 2)
    Select(browser.find_element(By.ID, "graph-cap")).select_by_value("20")
    drawn(browser, ALEMBIC, until=lambda state: "left out" in state["note"])
    shared = browser.current_url
    assert "depth=2" in shared
    assert "cap=20" in shared

    browser.refresh()
    reloaded = drawn(browser, ALEMBIC, until=lambda state: "left out" in state["note"])
    assert len(reloaded["nodes"]) == 20
    assert "7 more left out by the cap of 20" in reloaded["note"]
    fragment = shared.split("#", 1)[1]
    open_page(browser, f"{seeded.url}&{fragment}")  # the shared link, in a fresh page load
    again = drawn(browser, ALEMBIC, until=lambda state: "left out" in state["note"])
    assert len(again["nodes"]) == 20
    assert Select(browser.find_element(By.ID, "graph-depth")).first_selected_option.text == "2 hops"

    open_page(browser, f"{seeded.url}&entity={ALEMBIC}&depth=9&cap=7")
    fallback = drawn(browser, ALEMBIC)
    assert fallback["nodes"] == ["Alembic", "PostgreSQL"]  # depth 1, cap 40: the defaults
    assert "depth=1" in browser.current_url
    assert "cap=40" in browser.current_url
    assert severe(browser) == []


@needs_browser
def test_markdown_renders_without_running_memory_text(
    seeded: Seeded,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    slug = seeded.slugs["probe"]
    browser.get_log("browser")
    open_page(browser, f"{seeded.url}&memory={slug}")
    panel = browser.find_element(By.ID, "memory")
    wait_for("the probe", lambda: panel.get_attribute("data-slug") == slug)
    body = browser.find_element(By.ID, "memory-body")
    assert browser.execute_script("return window.pwned === undefined")
    assert body.find_elements(By.CSS_SELECTOR, "script, img, b") == []
    text = body.text
    assert "<script>window.pwned = 1</script>" in text
    assert '<img src="x" onerror="window.pwned = 2">' in text
    assert "[click me](javascript:window.pwned=3)" in text  # left as text, not a link
    hrefs = [a.get_attribute("href") for a in body.find_elements(By.CSS_SELECTOR, "a.external")]
    assert hrefs == ["https://www.postgresql.org/docs/"]
    assert [li.text for li in body.find_elements(By.CSS_SELECTOR, "ul > li")] == [
        "PostgreSQL keeps the orders",
        "SELECT 1 works",
    ]
    assert body.find_element(By.CSS_SELECTOR, "li strong").text == "orders"
    assert body.find_element(By.CSS_SELECTOR, "pre code").text == "SELECT '<b>not bold</b>';"
    browser.find_elements(By.CSS_SELECTOR, "#memory-body a.entity-link")[0].click()
    drawn(browser, PG)  # an entity named in the text opens its graph
    assert browser.execute_script("return window.pwned === undefined")

    # a session shows its timeline: its labelled parts, then what happened to it
    session = seeded.slugs["session"]
    open_page(browser, f"{seeded.url}&memory={session}")
    panel = browser.find_element(By.ID, "memory")
    wait_for("the session", lambda: panel.get_attribute("data-slug") == session)
    steps = wait_for(
        "the timeline",
        lambda: [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#memory-timeline li")],
    )
    assert steps[:3] == [
        "Asked fix the cart total when two discounts stack.",
        "Found the backend rounded each line with round().",
        "Decided carry money as integer cents; PostgreSQL stores BIGINT.",
    ]
    assert steps[3].endswith(" written by test")
    assert browser.find_element(By.ID, "memory-timeline-title").text == "Timeline of the session"
    assert severe(browser) == []


@needs_browser
def test_edit_forget_restore_and_merge_are_audited_as_the_page(
    seeded: Seeded,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    slug, dup = seeded.slugs["cents"], seeded.slugs["dup"]
    browser.get_log("browser")
    open_page(browser, seeded.url)
    loaded(browser, "the home list", lambda rows: len(rows) >= 29)
    browser.find_element(By.CSS_SELECTOR, f'#home-list li[data-slug="{slug}"]').click()
    panel = browser.find_element(By.ID, "memory")
    wait_for("the memory", lambda: panel.get_attribute("data-slug") == slug)

    browser.find_element(By.TAG_NAME, "body").send_keys("e")  # the keyboard opens the form
    title = browser.find_element(By.ID, "edit-title")
    wait_for("the edit form", title.is_displayed)
    title.clear()
    title.send_keys("Money is integer cents everywhere")
    tags = browser.find_element(By.ID, "edit-tags")
    tags.clear()
    tags.send_keys("money, postgres")
    browser.find_element(By.ID, "edit-triggers").send_keys("cents, rounding")
    browser.find_element(By.ID, "edit-save").click()
    wait_for(
        "the new title",
        lambda: (
            browser.find_element(By.ID, "memory-title").text == "Money is integer cents everywhere"
        ),
    )
    row = f'#home-list li[data-slug="{slug}"] .title'
    assert browser.find_element(By.CSS_SELECTOR, row).text == "Money is integer cents everywhere"

    browser.find_element(By.ID, "memory-forget").click()
    wait_for("forgotten", lambda: panel.get_attribute("data-state") == "forgotten")
    wait_for(
        "the row marked",
        lambda: any(r["slug"] == slug and r["state"] == "forgotten" for r in home_rows(browser)),
    )
    browser.find_element(By.ID, "memory-restore").click()
    wait_for("restored", lambda: panel.get_attribute("data-state") == "alive")

    browser.find_element(By.ID, "memory-merge-open").click()
    browser.find_element(By.ID, "merge-drop").send_keys(dup)
    browser.find_element(By.ID, "merge-save").click()
    wait_for(
        "the merge",
        lambda: f"merged {dup} into {slug}" in browser.find_element(By.ID, "status").text,
    )

    with uds_client(seeded.daemon.home) as http:
        meta = http.get(f"/v1/memories/{slug}").json()["meta"]
        assert meta["title"] == "Money is integer cents everywhere"
        assert meta["triggers"] == ["cents", "rounding"]
        assert set(meta["tags"]) == {"money", "postgres", "dup"}  # the merge brought "dup"
        assert meta["decay_state"] == "alive"
        assert http.get(f"/v1/memories/{dup}").json()["meta"]["decay_state"] == "forgotten"
        events = [
            (r["event_type"], r["actor"]) for r in http.get(f"/v1/memories/{slug}/history").json()
        ]
    assert events[:4] == [
        ("record", "test"),
        ("update", "page"),
        ("archive", "page"),
        ("restore", "page"),
    ]
    assert events[4:] == [("merge", "page")]
    timeline = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#memory-timeline li")]
    assert any("edited by page" in line for line in timeline)
    assert severe(browser) == []


@needs_browser
def test_live_feed_shows_new_captures_without_a_reload(
    seeded: Seeded,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    open_page(browser, seeded.url)
    loaded(browser, "the home list", lambda rows: len(rows) >= 28)
    wait_for(
        "the live stream",
        lambda: browser.find_element(By.ID, "feed-status").get_attribute("data-state") == "live",
    )
    with uds_client(seeded.daemon.home) as http:
        made = http.post(
            "/v1/memories",
            json={
                "type": "decision",
                "title": "Adopt Vite for the admin app",
                "body": "Vite replaces Webpack.",
                "scope": str(seeded.project),
                "created_at": format_ts(utcnow()),
            },
        )
        assert made.status_code == 201, made.text
    recorded = made.json()["meta"]["slug"]
    wait_for("the new memory on top", lambda: home_rows(browser)[0]["slug"] == recorded)
    assert home_rows(browser)[0]["fresh"]

    captured = captured_session(seeded.daemon.home, seeded.project)  # the hook's inbox drop
    wait_for("the capture on top", lambda: home_rows(browser)[0]["slug"] == captured)
    feed = browser.execute_script(
        "return [...document.querySelectorAll('#feed li')].map(li => [li.dataset.slug,"
        " li.dataset.event])"
    )
    assert feed[:2] == [[captured, "capture"], [recorded, "record"]]
    assert browser.find_element(By.ID, "feed-count").text == str(len(feed))
    assert severe(browser) == []
