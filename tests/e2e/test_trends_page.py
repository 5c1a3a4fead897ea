"""The graph page's Trends view in headless chromium against a real daemon on TCP: a Chart.js
chart of mentions per day for the top entities, and the supersede report as a timeline."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from memoryd.models import format_ts, utcnow
from tests.daemon_harness import free_port, running, uds_client
from tests.e2e.test_graph_page import browser, needs_browser, open_page, wait_for  # noqa: F401

DAY = timedelta(days=1)
VITE, KUZU = "entity:tool:Vite", "entity:library:Kuzu"


def chart_state(driver: webdriver.Chrome) -> dict[str, Any] | None:
    """The drawn chart's labels and datasets, and whether its canvas holds painted pixels."""
    state: dict[str, Any] | None = driver.execute_script(
        "const c = window.memorydTrendsChart; if (!c) return null;"
        " const canvas = document.getElementById('trends-chart');"
        " const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;"
        " let painted = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) painted++;"
        " return {labels: c.data.labels, type: c.config.type,"
        " datasets: c.data.datasets.map(d => ({label: d.label, data: d.data})),"
        " width: canvas.width, height: canvas.height, painted,"
        " loaded: document.getElementById('trends').dataset.loaded || null};"
    )
    return state


def chart_when(
    driver: webdriver.Chrome, what: str, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    return wait_for(
        what, lambda: state if (state := chart_state(driver)) is not None and check(state) else None
    )


def timeline(driver: webdriver.Chrome) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = driver.execute_script(
        "return [...document.querySelectorAll('#timeline .decision')].map(li => ({"
        " newer: li.dataset.newer, older: li.dataset.older, by: li.dataset.decidedBy,"
        " when: li.querySelector('.when').textContent,"
        " entities: li.querySelector('.entities').textContent,"
        " what: li.querySelector('.what').textContent,"
        " why: li.querySelector('.why').textContent}))"
    )
    return rows


@needs_browser
def test_trends_view_draws_the_mentions_chart_and_the_supersede_timeline(
    home: Path,
    project: Path,
    browser: webdriver.Chrome,  # noqa: F811  (the fixture imported above)
) -> None:
    now = utcnow()
    with running(home, free_port()) as daemon:
        with uds_client(home) as http:

            def post(path: str, payload: dict[str, Any]) -> str:
                response = http.post(path, json=payload)
                assert response.status_code == 201, response.text
                slug: str = response.json()["meta"]["slug"]
                return slug

            def fact(title: str, entities: list[str], age: int, **extra: Any) -> str:
                memory = {
                    "type": "fact",
                    "title": title,
                    "body": f"{title}.",
                    "scope": str(project),
                    "created_at": format_ts(now - age * DAY),
                    **extra,
                }
                return post(
                    "/v1/graph/facts",
                    {"memory": memory, "entity_ids": entities, "relations": []},
                )

            for title, age in [
                ("Vite one", 5),
                ("Vite two", 2),
                ("Vite three", 2),
                ("Vite four", 0),
            ]:
                fact(title, [VITE], age)
            fact("Kuzu one", [KUZU], 1)
            older_db = fact("The graph lives in Neo4j", [KUZU, "entity:tool:Neo4j"], 20)
            newer_db = fact("The graph lives in Kuzu", [KUZU], 3, supersedes=[older_db])

            def decision(title: str, body: str) -> str:
                payload = {"type": "decision", "title": title, "body": body, "scope": str(project)}
                return post("/v1/memories", payload)

            react = decision("Frontend framework", "Prefer React for the dashboard.")
            solid = decision(
                "Dashboard moves to Solid",
                "Switched the dashboard from React to Solid; the bundle is 40% smaller.",
            )
            api_trends = http.get("/v1/trends", params={"days": 7}).json()
        assert [s["name"] for s in api_trends["mentions"]][:2] == ["Vite", "Kuzu"]

        open_page(
            browser, f"http://127.0.0.1:{daemon.port}/#token={daemon.token()}&trends=1&days=7"
        )
        state = wait_for(
            "the chart", lambda: (s := chart_state(browser)) and s["loaded"] and s["painted"] and s
        )
        assert state["type"] == "line"
        assert state["labels"] == api_trends["days"]
        assert len(state["labels"]) == 7
        assert state["labels"][-1] == now.date().isoformat()
        assert state["datasets"] == [
            {"label": s["name"], "data": s["counts"]} for s in api_trends["mentions"]
        ]
        vite = next(d for d in state["datasets"] if d["label"] == "Vite")
        assert vite["data"] == [0, 1, 0, 0, 2, 0, 1]  # 5, 2, 2 and 0 days ago
        assert state["width"] > 0
        assert state["height"] > 0
        assert not browser.find_element(By.ID, "trends-empty").is_displayed()

        entries = wait_for("the timeline", lambda: timeline(browser))
        assert [(e["newer"], e["older"], e["by"]) for e in entries] == [
            (solid, react, "auto"),  # decided now
            (newer_db, older_db, "user"),  # decided 3 days ago (its memory's date)
        ]
        assert entries[0]["entities"] == "React"
        assert entries[0]["what"] == "Dashboard moves to Solid replaced Frontend framework"
        assert "decided by auto" in entries[0]["why"]
        assert "rule:switch-from-to" in entries[0]["why"]
        assert entries[1]["entities"] == "Kuzu"
        assert entries[1]["when"] == (now - 3 * DAY).date().isoformat()
        assert browser.find_element(By.ID, "timeline-count").text == "2"

        # a longer window redraws the same chart with more days
        Select(browser.find_element(By.ID, "trends-days")).select_by_value("30")
        wait_for("30 days", lambda: len((chart_state(browser) or {}).get("labels", [])) == 30)
        assert "days=30" in browser.current_url

        # past 60 days the days are summed: per week up to 180 days, per month beyond
        Select(browser.find_element(By.ID, "trends-days")).select_by_value("365")
        months = chart_when(browser, "months", lambda s: len(s["labels"]) in (12, 13))
        assert all(re.fullmatch(r"\d{4}-\d{2}", label) for label in months["labels"])
        assert months["labels"][-1] == now.strftime("%Y-%m")
        with uds_client(home) as http:
            year = http.get("/v1/trends", params={"days": 365}).json()
        assert {d["label"]: sum(d["data"]) for d in months["datasets"]} == {
            s["name"]: sum(s["counts"]) for s in year["mentions"]
        }
        heading = browser.find_element(By.ID, "trends-heading").text
        assert heading == "Mentions per month of the entities mentioned most"
        Select(browser.find_element(By.ID, "trends-days")).select_by_value("180")
        weeks = chart_when(browser, "weeks", lambda s: len(s["labels"]) in (26, 27))
        mondays = [date.fromisoformat(label) for label in weeks["labels"]]
        assert all(d.weekday() == 0 for d in mondays)
        assert [b - a for a, b in pairwise(mondays)] == [7 * DAY] * (len(mondays) - 1)

        # a decision in the timeline opens its memory
        browser.find_element(By.CSS_SELECTOR, "#timeline .decision .what button").click()
        wait_for(
            "the newer memory",
            lambda: browser.find_element(By.ID, "memory").get_attribute("data-slug") == solid,
        )
        on_top = browser.execute_script(
            "const r = document.getElementById('memory-title').getBoundingClientRect();"
            " const hit = document.elementFromPoint(r.left + 5, r.top + r.height / 2);"
            " return document.getElementById('memory').contains(hit);"
        )
        assert on_top, "the memory panel is hidden behind the trends view"
        browser.find_element(By.ID, "trends-close").click()
        assert not browser.find_element(By.ID, "trends").is_displayed()
        assert "trends" not in browser.current_url
        errors = browser.get_log("browser")
        assert [e for e in errors if e["level"] == "SEVERE"] == []
