"""The entity view of a hub (an entity named by many memories), through a real daemon on TCP
and in headless chromium: at most `cap` entities, the strongest, with a true count of the
ones left out, and at most `EDGES_PER_NODE` lines per entity with a true count of the
edges left out (issue 29: a hub's view at 10k memories drew 2,490 edges and took seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import httpx
import pytest
from selenium import webdriver

from memoryd.api.page_graph import EDGES_PER_NODE
from tests.conftest import isolate_environment
from tests.daemon_harness import Daemon, free_port, running, uds_client
from tests.e2e.test_graph_page import (  # noqa: F401  (the browser fixture)
    browser,
    needs_browser,
    open_page,
    wait_for,
)

HUB = "entity:tool:PostgreSQL"
NEIGHBOURS = 26
RELATED = 9
"""The neighbour the hub also has a relation with (`uses`): ranked before every co-mention."""
FORGOTTEN = 25
"""The weakest neighbour: three more memories name it with the hub, all three forgotten."""


def lib(k: int) -> str:
    return f"entity:library:Lib{k:02d}"


@dataclass
class Hub:
    daemon: Daemon

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.daemon.port}"

    def graph(self, **params: Any) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.daemon.token()}"}
        answer = httpx.get(
            f"{self.base}/v1/page/graph", params={"entity": HUB, **params}, headers=headers
        )
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found


def lines(edges: list[dict[str, Any]]) -> int:
    """What the page draws for these edges: each co-mention, one arrow per direction."""
    arrows = {(e["source"], e["target"]) for e in edges if e["kind"] == "relation"}
    return len(arrows) + sum(e["kind"] == "co_mention" for e in edges)


def co_mentions(k: int) -> int:
    """Memories (not forgotten) that name the hub and neighbour `k`, as seeded below."""
    return NEIGHBOURS - k + (3 if k in (0, 1) else 0) + (1 if k == RELATED else 0)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """Neighbour k shares 26 - k memories with the hub; 0 and 1 three more together; 0-7
    are all named by one memory without the hub (28 pairs among them); the hub uses 9."""
    root = tmp_path_factory.mktemp("hub-view")
    project = root / "project"
    project.mkdir()
    facts: list[tuple[list[str], list[dict[str, str]]]] = []
    for k in range(NEIGHBOURS):
        facts += [([HUB, lib(k)], [])] * (NEIGHBOURS - k)
    facts += [([HUB, lib(0), lib(1)], [])] * 3
    facts.append(([lib(k) for k in range(8)], []))
    facts.append(
        ([HUB, lib(RELATED)], [{"subject": HUB, "predicate": "uses", "object": lib(RELATED)}])
    )
    facts += [([HUB, lib(FORGOTTEN)], [])] * 3
    payload = {
        "facts": [
            {
                "memory": {
                    "type": "fact",
                    "title": f"Note {i}: {' '.join(e.rsplit(':', 1)[1] for e in entities)}",
                    "body": f"Note {i} names {', '.join(entities)}.",
                    "scope": str(project),
                },
                "entity_ids": entities,
                "relations": relations,
            }
            for i, (entities, relations) in enumerate(facts)
        ]
    }
    with pytest.MonkeyPatch.context() as env:
        isolate_environment(env, root)
        env.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")
        with running(root / "home", free_port()) as daemon, uds_client(daemon.home) as http:
            written = http.post("/v1/graph/facts/batch", json=payload)
            assert written.status_code == 201, written.text
            for memory in written.json()[-3:]:  # the three FORGOTTEN ones
                assert http.delete(f"/v1/memories/{memory['meta']['slug']}").status_code == 200
            yield Hub(daemon)


def test_a_hub_draws_the_strongest_under_the_cap_and_counts_the_rest(hub: Hub) -> None:
    capped = hub.graph(cap=8)
    strongest = [lib(RELATED)] + [lib(k) for k in range(6)]  # the relation first
    assert [n["id"] for n in capped["nodes"]] == [HUB, *strongest]
    assert [n["weight"] for n in capped["nodes"][2:]] == [co_mentions(k) for k in range(6)]
    # every neighbour is reached through the hub: 26, of which 7 are drawn
    assert capped["left_out"] == NEIGHBOURS - 7
    rest = sorted((k for k in range(6, NEIGHBOURS) if k != RELATED), key=co_mentions)[::-1]
    assert capped["left_out_names"] == [f"Lib{k:02d}" for k in rest]
    assert co_mentions(FORGOTTEN) == 1  # the forgotten three do not count

    # 22 linked pairs among the 8 (the hub with each, 15 among 0-5): each one's link to the
    # hub (8 lines: the hub and 9 have an arrow too), then the strongest others while the
    # lines stay within 2 per entity
    pairs = {tuple(sorted((e["source"], e["target"]))) for e in capped["edges"]}
    assert all((HUB, n) in pairs or (n, HUB) in pairs for n in strongest)
    assert (lib(0), lib(1)) in pairs  # the strongest other pair (4 memories)
    assert lines(capped["edges"]) == EDGES_PER_NODE * 8
    assert len(pairs) == 7 + EDGES_PER_NODE * 8 - 8 < 22
    relation = [e for e in capped["edges"] if e["kind"] == "relation"]
    assert [(e["source"], e["label"], e["target"]) for e in relation] == [
        (HUB, "uses", lib(RELATED))
    ]
    assert capped["edges_left_out"] == 22 + 1 - len(capped["edges"])  # 22 pairs + 1 arrow

    # two hops reach nothing new (every neighbour hangs off the hub) but name the same
    deep = hub.graph(cap=8, depth=2)
    assert (deep["left_out"], deep["left_out_names"]) == (
        capped["left_out"],
        capped["left_out_names"],
    )
    everything = hub.graph(cap=40)
    assert (len(everything["nodes"]), everything["left_out"]) == (1 + NEIGHBOURS, 0)


@needs_browser
def test_the_page_draws_a_hub_under_the_cap(
    hub: Hub,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    answer = hub.graph(cap=20)
    assert answer["left_out"] == NEIGHBOURS - 19
    open_page(browser, f"{hub.base}/#token={hub.daemon.token()}&entity={HUB}&cap=20")
    drawn = wait_for(
        "the hub drawn",
        lambda: browser.execute_script(
            "const note = document.getElementById('graph-note');"
            " if (document.getElementById('graph').dataset.centre !== arguments[0]) return null;"
            " const g = window.memorydGraph;"
            " return {nodes: g.nodes().length, co: g.edges('.co-mention').length,"
            " arrows: g.edges('.relation').length, left: note.dataset.leftOut,"
            " edgesLeft: note.dataset.edgesLeftOut, note: note.textContent};",
            HUB,
        ),
    )
    co = [e for e in answer["edges"] if e["kind"] == "co_mention"]
    assert (drawn["nodes"], drawn["co"], drawn["arrows"]) == (20, len(co), 1)
    assert drawn["co"] + drawn["arrows"] == lines(answer["edges"]) == EDGES_PER_NODE * 20
    assert (drawn["left"], drawn["edgesLeft"]) == ("7", str(answer["edges_left_out"]))
    assert answer["edges_left_out"] > 0
    assert "7 more left out by the cap of 20: Lib19, Lib20" in drawn["note"]
    assert f"{answer['edges_left_out']} weaker links between them not drawn" in drawn["note"]

    # one arrow: labelled; past LABELLED_ARROWS an arrow's label shows under the pointer only
    hover = browser.execute_script(
        "const g = window.memorydGraph; const arrow = g.edges('.relation');"
        " const all = [g.scratch('labelAll'), arrow.hasClass('labelled')];"
        " g.scratch('labelAll', false); arrow.removeClass('labelled');"
        " g.getElementById(arguments[0]).emit('mouseover'); const on = arrow.hasClass('labelled');"
        " g.getElementById(arguments[0]).emit('mouseout'); const off = arrow.hasClass('labelled');"
        " arrow.emit('mouseover'); const self = arrow.hasClass('labelled');"
        " return [...all, on, off, self];",
        lib(RELATED),
    )
    assert hover == [True, True, True, False, True]


NODE_BOXES = """
const g = window.memorydGraph;
if (!g || document.getElementById('graph').dataset.centre !== arguments[0]) return null;
return {zoom: g.zoom(), nodes: g.nodes().map((n) => {
  const b = n.boundingBox({includeLabels: true});
  return {id: n.id(), hop: n.data('hop'), x: n.position('x'), y: n.position('y'),
          box: [b.x1, b.y1, b.x2, b.y2]};
})};
"""


def meet(a: list[float], b: list[float]) -> bool:
    """Two boxes [x1, y1, x2, y2] overlap."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@needs_browser
def test_the_layout_keeps_the_hubs_entities_and_labels_apart(
    hub: Hub,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    """At the cap every entity and its label has room of its own, readable at the zoom that
    fits them all, the centre in the middle and its neighbours around it; the same
    neighbourhood drawn again is the same picture (layout.js)."""
    open_page(browser, f"{hub.base}/#token={hub.daemon.token()}&entity={HUB}&cap=40")
    drawn = wait_for("the hub drawn", lambda: browser.execute_script(NODE_BOXES, HUB))
    nodes = drawn["nodes"]
    assert len(nodes) == 1 + NEIGHBOURS
    overlapping = [
        (a["id"], b["id"]) for a, b in combinations(nodes, 2) if meet(a["box"], b["box"])
    ]
    assert overlapping == []
    assert drawn["zoom"] >= 0.75  # 12px labels drawn at 9px or more
    centre = next(n for n in nodes if n["id"] == HUB)
    assert (centre["x"], centre["y"]) == (0, 0)
    assert {n["hop"] for n in nodes if n["id"] != HUB} == {1}

    browser.execute_async_script(
        "window.memorydPage.centre(arguments[0]).then(() => arguments[1]())", HUB
    )
    again = browser.execute_script(NODE_BOXES, HUB)["nodes"]
    assert [(n["id"], n["x"], n["y"]) for n in again] == [(n["id"], n["x"], n["y"]) for n in nodes]
