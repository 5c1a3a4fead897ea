"""The graph page in headless chromium against a real daemon on TCP, and `memoryd ui`.

The browser tests need Debian's chromium and chromedriver (`apt-get install chromium
chromium-driver`, which `scripts/ensure-chromium.sh` runs in CI); without them they skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.scope import resolve_scope
from tests.conftest import isolate_environment
from tests.daemon_harness import Daemon, free_port, running, uds_client

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 20.0

NO_BROWSER = (
    "needs /usr/bin/chromium and /usr/bin/chromedriver:"
    " `apt-get install chromium chromium-driver` (or scripts/ensure-chromium.sh as root)"
)
needs_browser = pytest.mark.skipif(
    not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()), reason=NO_BROWSER
)

T = TypeVar("T")
cli = CliRunner()

ADA = "entity:person:Ada"
MEMORYD = "entity:project:memoryd"
KUZU = "entity:library:Kuzu"
RUFF = "entity:tool:Ruff"
LINUX = "entity:tool:Linux"

# (title, body, entities, relations): Ada -works_on-> memoryd -uses-> Kuzu -runs_on-> Linux,
# and Ada -prefers-> Ruff. From Ada, two hops reach everything but Linux.
FACTS: list[tuple[str, str, list[str], list[tuple[str, str, str]]]] = [
    (
        "Ada works on memoryd",
        "Ada works on memoryd and reviews the graph code.",
        [ADA, MEMORYD],
        [(ADA, "works_on", MEMORYD)],
    ),
    (
        "memoryd keeps its graph in Kuzu",
        "The daemon owns one embedded Kuzu database.",
        [MEMORYD, KUZU],
        [(MEMORYD, "uses", KUZU)],
    ),
    (
        "Kuzu builds on Linux",
        "The Kuzu wheels we use are built for Linux only.",
        [KUZU, LINUX],
        [(KUZU, "runs_on", LINUX)],
    ),
    (
        "Ada prefers Ruff",
        "Ada wants Ruff for linting and formatting,\nwith the line length at 100.",
        [ADA, RUFF],
        [(ADA, "prefers", RUFF)],
    ),
]


@dataclass
class Served:
    daemon: Daemon
    slugs: dict[str, str]  # title -> slug

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.daemon.port}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon on TCP for the module, seeded with FACTS (starting one costs seconds)."""
    root = tmp_path_factory.mktemp("graph-page")
    project = root / "project"
    project.mkdir()
    with pytest.MonkeyPatch.context() as env:
        # conftest's isolation is function-scoped and runs after module fixtures: redo it.
        isolate_environment(env, root)
        env.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
        with running(root / "home", free_port()) as daemon:
            slugs = {}
            with uds_client(daemon.home) as http:
                for title, body, entities, relations in FACTS:
                    payload = {
                        "memory": {
                            "type": "fact",
                            "title": title,
                            "body": body,
                            "scope": str(project),
                        },
                        "entity_ids": entities,
                        "relations": [
                            {"subject": s, "predicate": p, "object": o} for s, p, o in relations
                        ],
                    }
                    response = http.post("/v1/graph/facts", json=payload)
                    assert response.status_code == 201, response.text
                    slugs[title] = response.json()["meta"]["slug"]
            yield Served(daemon, slugs)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        pytest.skip(NO_BROWSER)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float = WAIT_S) -> T:
    """Poll until `check` returns something truthy; fail naming what never happened."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutException(f"waited {timeout_s}s for {what}")
        time.sleep(0.05)


def open_page(driver: webdriver.Chrome, url: str) -> None:
    """A real page load (a fragment-only change would stay in the same document)."""
    driver.get("about:blank")
    driver.get(url)
    wait_for(
        "the page script", lambda: driver.execute_script("return document.readyState") == "complete"
    )


def graph_labels(driver: webdriver.Chrome, centre: str) -> list[str]:
    wait_for(
        f"the graph centred on {centre}",
        lambda: driver.execute_script(
            "return document.getElementById('graph').dataset.centre === arguments[0]"
            " && window.memorydGraph && window.memorydGraph.nodes().length > 0",
            centre,
        ),
    )
    labels: list[str] = driver.execute_script(
        "return window.memorydGraph.nodes().map(n => n.data('label'))"
    )
    return sorted(labels)


def visible_error(driver: webdriver.Chrome) -> dict[str, Any]:
    def shown() -> dict[str, Any] | None:
        box = driver.find_element(By.ID, "error")
        if not box.is_displayed():
            return None
        return {
            "code": box.get_attribute("data-code"),
            "message": driver.find_element(By.ID, "error-message").text,
            "hint": driver.find_element(By.ID, "error-hint").text,
        }

    return wait_for("an error on the page", shown)


def memory_titles(driver: webdriver.Chrome) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#memories .memory-link .title")]


def click_node(driver: webdriver.Chrome, entity_id: str) -> None:
    """A real mouse click on the node's spot on the canvas."""
    x, y = driver.execute_script(
        "const p = window.memorydGraph.getElementById(arguments[0]).renderedPosition();"
        " return [p.x, p.y];",
        entity_id,
    )
    graph = driver.find_element(By.ID, "graph")
    size = graph.size
    ActionChains(driver).move_to_element_with_offset(
        graph, round(x - size["width"] / 2), round(y - size["height"] / 2)
    ).click().perform()


def result_button(driver: webdriver.Chrome, entity_id: str) -> WebElement:
    selector = f'#results .result[data-id="{entity_id}"]'
    return wait_for(
        f"the search result {entity_id}",
        lambda: next(iter(driver.find_elements(By.CSS_SELECTOR, selector)), None),
    )


@needs_browser
def test_search_draw_recentre_and_read_a_memory(served: Served, browser: webdriver.Chrome) -> None:
    token = served.daemon.token()
    open_page(browser, f"{served.url}/#token={token}")
    # the token moved into this tab's sessionStorage and out of the address bar
    assert "token" not in browser.current_url
    assert browser.execute_script("return sessionStorage.getItem('memoryd.token')") == token

    from selenium.webdriver.support.select import Select

    Select(browser.find_element(By.ID, "graph-depth")).select_by_value("2")
    box = browser.find_element(By.ID, "search")
    box.send_keys("ad", Keys.ENTER)
    result_button(browser, ADA).click()
    assert graph_labels(browser, ADA) == ["Ada", "Kuzu", "Ruff", "memoryd"]  # Linux: 3 hops
    edges = browser.execute_script(
        "return window.memorydGraph.edges().map(e => [e.data('kind'), e.data('label')])"
    )
    assert sorted(label for kind, label in edges if kind == "relation") == [
        "prefers",
        "uses",
        "works_on",
    ]
    # each fact names the two entities of its relation: a co-mention beside each arrow
    assert sorted(kind for kind, _ in edges) == ["co_mention"] * 3 + ["relation"] * 3
    assert sorted(memory_titles(browser)) == ["Ada prefers Ruff", "Ada works on memoryd"]
    assert "person" in browser.find_element(By.ID, "entity-meta").text

    click_node(browser, MEMORYD)
    assert graph_labels(browser, MEMORYD) == ["Ada", "Kuzu", "Linux", "Ruff", "memoryd"]
    wait_for(
        "memoryd's memories",
        lambda: (
            sorted(memory_titles(browser))
            == ["Ada works on memoryd", "memoryd keeps its graph in Kuzu"]
        ),
    )
    assert "entity=entity%3Aproject%3Amemoryd" in browser.current_url

    slug = served.slugs["memoryd keeps its graph in Kuzu"]
    browser.find_element(By.CSS_SELECTOR, f'.memory-link[data-slug="{slug}"]').click()
    panel = browser.find_element(By.ID, "memory")
    wait_for("the memory panel", lambda: panel.get_attribute("data-slug") == slug)
    assert browser.find_element(By.ID, "memory-title").text == "memoryd keeps its graph in Kuzu"
    assert browser.find_element(By.ID, "memory-body").text == (
        "The daemon owns one embedded Kuzu database."
    )
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#memory-body a")] == ["Kuzu"]
    meta = browser.find_element(By.ID, "memory-meta").text
    assert "fact" in meta
    assert slug in meta
    assert f"memory={slug}" in browser.current_url

    # an entity in the panel re-centres the graph
    browser.find_element(By.CSS_SELECTOR, f'#memory-meta button[title="{KUZU}"]').click()
    assert graph_labels(browser, KUZU) == ["Ada", "Kuzu", "Linux", "memoryd"]
    assert browser.find_element(By.ID, "error").is_displayed() is False

    # nothing went wrong behind the scenes: no script error, no CSP violation, no failed call
    severe = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


@needs_browser
def test_deep_links(served: Served, browser: webdriver.Chrome) -> None:
    token = served.daemon.token()
    slug = served.slugs["Ada prefers Ruff"]
    open_page(browser, f"{served.url}/?memory={slug}#token={token}")
    panel = browser.find_element(By.ID, "memory")
    wait_for("the memory from ?memory=", lambda: panel.get_attribute("data-slug") == slug)
    # markdown: a single newline is a soft break
    assert browser.find_element(By.ID, "memory-body").text == (
        "Ada wants Ruff for linting and formatting, with the line length at 100."
    )

    open_page(browser, f"{served.url}/#entity={ADA}&memory={served.slugs['Kuzu builds on Linux']}")
    assert graph_labels(browser, ADA) == ["Ada", "Ruff", "memoryd"]  # one hop by default
    wait_for(
        "the memory from #memory=",
        lambda: browser.find_element(By.ID, "memory-title").text == "Kuzu builds on Linux",
    )


@needs_browser
def test_api_errors_are_shown(served: Served, browser: webdriver.Chrome) -> None:
    token = served.daemon.token()
    open_page(browser, f"{served.url}/#token={token}&memory=no-such-memory")
    error = visible_error(browser)
    assert error["code"] == "not_found"
    assert "no-such-memory" in error["message"]

    browser.find_element(By.ID, "error-close").click()
    assert not browser.find_element(By.ID, "error").is_displayed()
    browser.find_element(By.ID, "search").send_keys("qqqnothing", Keys.ENTER)
    wait_for(
        "the empty result",
        lambda: "no entity matches" in browser.find_element(By.ID, "results").text,
    )
    assert not browser.find_element(By.ID, "error").is_displayed()

    # without the token every call is refused, and the page says what to do
    browser.execute_script("sessionStorage.clear()")
    open_page(browser, f"{served.url}/")
    error = visible_error(browser)
    assert error["code"] == "unauthorized"
    assert error["message"] == "a bearer token is required on TCP"
    assert "`memoryd token`" in error["hint"]  # the API's own hint
    assert "memoryd ui" in error["hint"]

    open_page(browser, f"{served.url}/#token=wrong")
    assert visible_error(browser)["message"] == "wrong bearer token"


def test_ui_prints_and_opens_the_page(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    home = str(served.daemon.home)
    here = resolve_scope(with_remote=False).scope_hash  # the page opens on this project
    expected = f"{served.url}/#token={served.daemon.token()}&project={here}"
    result = cli.invoke(app, ["ui", "--print-only", "--home", home])
    assert result.exit_code == 0, result.output
    assert result.stdout == expected + "\n"

    opened: list[str] = []

    def open_url(url: str) -> bool:
        opened.append(url)
        return True

    monkeypatch.setattr("webbrowser.open", open_url)
    assert cli.invoke(app, ["ui", "--home", home]).exit_code == 0
    assert opened == [expected]
    monkeypatch.setattr("webbrowser.open", lambda url: False)
    headless = cli.invoke(app, ["ui", "--home", home])
    assert headless.exit_code == 0
    assert headless.stdout == expected + "\n"
    assert "open the URL above yourself" in headless.stderr

    page = httpx.get(expected.partition("#")[0], timeout=10)  # the page itself needs no token
    assert page.status_code == 200
    assert "/static/app.js" in page.text
    assert httpx.get(f"{served.url}/v1/health", timeout=10).status_code == 401


def test_ui_needs_a_daemon_on_tcp(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
    none = cli.invoke(app, ["ui", "--print-only", "--home", str(home)])
    assert none.exit_code == 3
    assert f"no memoryd daemon serves {home}" in none.stderr
    assert "memoryd serve --detach" in none.stderr
    with running(home):  # --no-tcp
        socket_only = cli.invoke(app, ["ui", "--print-only", "--home", str(home)])
    assert socket_only.exit_code == 8
    assert "--no-tcp" in socket_only.stderr
    assert socket_only.stdout == ""


# -- the API docs (/docs): Swagger UI from the package, the token as on the graph page --------
def operations(driver: webdriver.Chrome) -> list[str]:
    """The `METHOD path` of each operation Swagger UI listed, once it has drawn them."""

    def listed() -> list[str] | None:
        blocks = driver.find_elements(By.CSS_SELECTOR, ".opblock .opblock-summary")
        found = [
            " ".join(
                b.find_element(By.CSS_SELECTOR, sel).text
                for sel in (".opblock-summary-method", ".opblock-summary-path")
            )
            for b in blocks
        ]
        return found or None

    return wait_for("Swagger UI's operations list", listed)


@needs_browser
def test_docs_render_the_operations_with_the_token(
    served: Served, browser: webdriver.Chrome
) -> None:
    token = served.daemon.token()
    spec = httpx.get(
        f"{served.url}/openapi.json", headers={"Authorization": f"Bearer {token}"}, timeout=10
    ).json()
    expected = {
        f"{method.upper()} {path}" for path, item in spec["paths"].items() for method in item
    }
    browser.get_log("browser")  # drop what earlier tests logged
    open_page(browser, f"{served.url}/docs#token={token}")
    shown = operations(browser)
    assert {" ".join(op.split()) for op in shown} == expected
    assert "GET /v1/health" in shown
    # the token moved into this tab's sessionStorage and out of the address bar
    assert "token" not in browser.current_url
    assert browser.execute_script("return sessionStorage.getItem('memoryd.token')") == token
    assert not browser.find_element(By.ID, "docs-notice").is_displayed()

    # "Try it out" sends the token too: GET /v1/health answers 200 in the page
    get_health = spec["paths"]["/v1/health"]["get"]
    health = browser.find_element(
        By.ID, f"operations-{get_health['tags'][0]}-{get_health['operationId']}"
    )
    health.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait_for("Try it out", lambda: health.find_elements(By.CSS_SELECTOR, ".try-out__btn"))
    health.find_element(By.CSS_SELECTOR, ".try-out__btn").click()
    health.find_element(By.CSS_SELECTOR, ".execute").click()
    status = wait_for(
        "the live response",
        lambda: next(
            iter(
                health.find_elements(
                    By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status"
                )
            ),
            None,
        ),
    )
    assert status.text.strip() == "200"

    # everything came from the daemon: no request to another host, no CSP violation, no error
    hosts = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).host)"
    )
    assert set(hosts) == {f"127.0.0.1:{served.daemon.port}"}
    severe = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


@needs_browser
def test_the_graph_page_links_to_the_docs(served: Served, browser: webdriver.Chrome) -> None:
    """The page `memoryd ui` opens reaches the docs; the tab's token goes along."""
    open_page(browser, f"{served.url}/#token={served.daemon.token()}")
    browser.find_element(By.ID, "api-docs").click()
    wait_for("the docs page", lambda: browser.current_url == f"{served.url}/docs")
    assert "GET /v1/health" in operations(browser)

    browser.execute_script("sessionStorage.clear()")  # a tab that never had the token
    open_page(browser, f"{served.url}/docs")
    notice: Any = wait_for(
        "the notice",
        lambda: (
            browser.find_element(By.ID, "docs-notice").is_displayed()
            and browser.find_element(By.ID, "docs-notice")
        ),
    )
    assert "memoryd ui --docs" in notice.text


def test_ui_docs_opens_the_docs_page(served: Served) -> None:
    home = str(served.daemon.home)
    result = cli.invoke(app, ["ui", "--docs", "--print-only", "--home", home])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{served.url}/docs#token={served.daemon.token()}\n"


@needs_browser
def test_arrows_keep_the_stored_direction(served: Served, browser: webdriver.Chrome) -> None:
    """Centred on the middle of the chain Ada -> memoryd -> Kuzu -> Linux, every arrow still
    points from the relation's subject to its object (one hop: the default depth)."""
    stored = {relation for *_, relations in FACTS for relation in relations}
    token = served.daemon.token()
    for centre, depth_one in ((MEMORYD, 2), (KUZU, 2), (LINUX, 1)):
        open_page(browser, f"{served.url}/#token={token}&entity={centre}")
        graph_labels(browser, centre)
        drawn = browser.execute_script(
            "return window.memorydGraph.edges('.relation').map("
            "e => [e.data('source'), e.data('label'), e.data('target')])"
        )
        arrows = {tuple(edge) for edge in drawn}
        assert len(arrows) == len(drawn) == depth_one
        assert arrows <= stored, arrows - stored


# -- the Review view (issue 15) ------------------------------------------------------------------
REVIEWED = ("en-04-pin-kuzu.md", "zh-03-switch-pnpm.md", "en-16-uv-venv.md")


@needs_browser
def test_review_shows_evidence_and_approves_edits_and_rejects(
    served: Served, browser: webdriver.Chrome
) -> None:
    """Runs last in this module: the sessions it adds mention entities the tests above draw."""
    from selenium.webdriver.support.select import Select

    from tests.integration.test_promotions import labelled_body

    project = served.daemon.home.parent / "project"
    pids: dict[str, int] = {}
    with uds_client(served.daemon.home) as http:
        for name in REVIEWED:
            title, body = labelled_body(name)
            made = http.post(
                "/v1/memories",
                json={"type": "session", "title": title, "body": body, "scope": str(project)},
            )
            assert made.status_code == 201, made.text
            slug = made.json()["meta"]["slug"]
            scored = http.post(f"/v1/memories/{slug}/analyze", json={"mode": "heuristic"})
            pids[name] = scored.json()["promotion_id"]
        evidence = http.get(f"/v1/promotions/{pids[REVIEWED[0]]}").json()["evidence"]

    browser.get_log("browser")  # drop what the tests above logged (their refused calls)
    open_page(browser, f"{served.url}/#token={served.daemon.token()}&review=1")
    review = browser.find_element(By.ID, "review")
    wait_for("the pending promotions", lambda: review.get_attribute("data-loaded") == "3")
    assert browser.find_element(By.ID, "review-count").text == "3"

    def card(name: str) -> WebElement:
        return browser.find_element(By.CSS_SELECTOR, f'.promotion[data-id="{pids[name]}"]')

    def outcome(name: str) -> str:
        return wait_for(
            f"the decision on {name}",
            lambda: card(name).find_element(By.CLASS_NAME, "outcome").text or None,
        )

    first = card(REVIEWED[0])
    assert "scored by heuristic-v1" in first.find_element(By.CLASS_NAME, "scores").text
    assert "Kuzu 0.11.3 pin after segfaults" in first.find_element(By.CLASS_NAME, "source").text
    quotes = [q.text for q in first.find_elements(By.TAG_NAME, "blockquote")]
    assert quotes == evidence
    first.find_element(By.CLASS_NAME, "approve").click()
    assert outcome(REVIEWED[0]).startswith(f"approved: written as promoted-{pids[REVIEWED[0]]}-")

    second = card(REVIEWED[1])
    second.find_element(By.CLASS_NAME, "edit-open").click()
    Select(second.find_element(By.CLASS_NAME, "edit-type")).select_by_value("preference")
    title_box = second.find_element(By.CLASS_NAME, "edit-title")
    title_box.clear()
    title_box.send_keys("前端一律用 pnpm")
    second.find_element(By.CLASS_NAME, "save").click()
    assert outcome(REVIEWED[1]).startswith("approved as edited: written as ")

    third = card(REVIEWED[2])
    third.find_element(By.CLASS_NAME, "reject-reason").send_keys("we are moving back to pip")
    third.find_element(By.CLASS_NAME, "reject").click()
    assert outcome(REVIEWED[2]) == "rejected"
    wait_for("the empty badge", lambda: browser.find_element(By.ID, "review-count").text == "")

    with uds_client(served.daemon.home) as http:
        edited = http.get(f"/v1/promotions/{pids[REVIEWED[1]]}").json()
        memory = http.get(f"/v1/memories/{edited['promoted_slug']}").json()
        assert (memory["meta"]["type"], memory["meta"]["title"]) == (
            "preference",
            "前端一律用 pnpm",
        )
        assert edited["decided_by"] == "page"
        rejected = http.get(f"/v1/promotions/{pids[REVIEWED[2]]}").json()
        assert (rejected["status"], rejected["decision_reason"]) == (
            "rejected",
            "we are moving back to pip",
        )
    severe = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


@needs_browser
def test_parallel_relations_are_one_arrow_with_every_predicate(
    served: Served, browser: webdriver.Chrome
) -> None:
    """Two predicates between the same two entities draw one arrow labelled with both (a hub
    at 10k memories held 1,824 relations between 37 entities; each its own curve took
    seconds to draw). Last in the module: it adds a memory."""
    with uds_client(served.daemon.home) as http:
        payload = {
            "memory": {
                "type": "fact",
                "title": "Ada maintains Ruff's config",
                "body": "Ada maintains the Ruff config and uses Ruff in CI.",
                "scope": str(served.daemon.home.parent / "project"),
            },
            "entity_ids": [ADA, RUFF],
            "relations": [{"subject": ADA, "predicate": "uses", "object": RUFF}],
        }
        assert http.post("/v1/graph/facts", json=payload).status_code == 201
    open_page(browser, f"{served.url}/#token={served.daemon.token()}&entity={RUFF}")
    graph_labels(browser, RUFF)
    arrows = browser.execute_script(
        "return window.memorydGraph.edges('.relation')"
        ".map(e => [e.data('source'), e.data('target'), e.data('label')])"
    )
    assert [(source, target) for source, target, _ in arrows] == [(ADA, RUFF)]
    assert sorted(arrows[0][2].split(", ")) == ["prefers", "uses"]
