"""The graph page's Review panel in headless chromium against a real daemon on TCP: below the
pending promotions, supersede candidates are listed, and Accept or Reject decides them (as
`memoryd supersede accept|reject`).
"""

from __future__ import annotations

from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.daemon_harness import free_port, running, uds_client
from tests.e2e.test_graph_page import browser, needs_browser, open_page, wait_for  # noqa: F401

PAIRS = [
    ("Databases", "All backend services use PostgreSQL."),
    ("Billing on CockroachDB", "Moved only the billing service from Postgres to CockroachDB."),
    ("Bundler", "All frontends are bundled with Webpack."),
    ("Admin bundler", "The admin frontend moved from Webpack to Vite."),
]


def candidates(driver: webdriver.Chrome) -> list[tuple[str, str]]:
    """(newer, older) of the listed candidates, read in one script (the list re-renders)."""
    rows: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll('#candidates .candidate')]"
        ".map(li => [li.dataset.newer, li.dataset.older])"
    )
    return [(newer, older) for newer, older in rows]


@needs_browser
def test_review_lists_candidates_and_accept_or_reject_decides_them(
    home: Path,
    project: Path,
    browser: webdriver.Chrome,  # noqa: F811  (the fixture imported above)
) -> None:
    with running(home, free_port()) as daemon:
        slugs = []
        with uds_client(home) as http:
            for title, body in PAIRS:
                payload = {"type": "decision", "title": title, "body": body, "scope": str(project)}
                response = http.post("/v1/memories", json=payload)
                assert response.status_code == 201, response.text
                slugs.append(response.json()["meta"]["slug"])
        billing = (slugs[1], slugs[0])
        payments = (slugs[3], slugs[2])
        open_page(browser, f"http://127.0.0.1:{daemon.port}/#token={daemon.token()}&review=1")
        wait_for(
            "two candidates", lambda: sorted(candidates(browser)) == sorted([billing, payments])
        )
        assert browser.find_element(By.ID, "candidates-count").text == "2"
        item = browser.find_element(
            By.CSS_SELECTOR, f'#candidates .candidate[data-newer="{billing[0]}"]'
        )
        assert "limited to billing" in item.find_element(By.CSS_SELECTOR, ".reason").text
        item.find_element(By.CSS_SELECTOR, "button.accept").click()
        wait_for("the billing candidate to go", lambda: candidates(browser) == [payments])
        assert "active" in browser.find_element(By.ID, "status").text
        browser.find_element(By.CSS_SELECTOR, "#candidates button.reject").click()
        wait_for(
            "an empty review",
            lambda: (
                browser.execute_script(
                    "return [...document.querySelectorAll('#candidates li')]"
                    ".map(li => li.textContent)"
                )
                == ["No supersede candidate is waiting for a decision."]
            ),
        )
        with uds_client(home) as http:
            chain = http.get(f"/v1/memories/{billing[1]}/supersedes").json()["items"]
            assert [(r["newer"], r["status"], r["decided_by"]) for r in chain] == [
                (billing[0], "active", "user")
            ]
            decided = http.get(f"/v1/memories/{payments[0]}").json()["meta"]
            assert decided["supersede_decisions"][0]["status"] == "rejected"
            assert decided["supersedes"] == []
        errors = browser.get_log("browser")
        assert [e for e in errors if e["level"] == "SEVERE"] == []
