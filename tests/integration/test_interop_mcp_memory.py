"""`memoryd import/export mcp-memory`: the official MCP memory server's JSONL graph."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.errors import InvalidInput
from memoryd.interop import mcp_memory, mcp_memory_import
from memoryd.service import MemoryService

FIXTURE = Path(__file__).resolve().parents[3] / "shared/interop/fixtures/mcp_memory_graph.jsonl"
runner = CliRunner()

# Everything upstream allows that memoryd's types and predicates do not: an entityType and
# relationTypes outside memoryd's vocabulary, no observations, a repeated observation,
# relation endpoints that are not entities, order that is not alphabetical.
TRICKY = "\n".join(
    json.dumps(line)
    for line in [
        {"type": "entity", "name": "zeta", "entityType": "framework", "observations": ["b", "a"]},
        {"type": "entity", "name": "Alpha", "entityType": "Person", "observations": []},
        {"type": "entity", "name": "mid", "entityType": "tool", "observations": ["x", "y", "x"]},
        {"type": "relation", "from": "zeta", "to": "Alpha", "relationType": "inspired by"},
        {"type": "relation", "from": "Alpha", "to": "mid", "relationType": "uses"},
        {"type": "relation", "from": "Alpha", "to": "ghost", "relationType": "knows"},
        {"type": "relation", "from": "mid", "to": "zeta", "relationType": "USES"},
    ]
)


def fixture_text() -> str:
    if not FIXTURE.is_file():
        pytest.skip(f"{FIXTURE} not found (/work/shared is absent)")
    return FIXTURE.read_text(encoding="utf-8")


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def slugs_of(svc: MemoryService) -> set[str]:
    return {r[0] for r in svc.cypher("MATCH (m:Memory) RETURN m.slug").rows}


def round_trip(svc: MemoryService, project: Path, text: str) -> str:
    parsed = mcp_memory_import.parse_jsonl(text, source="test")
    mcp_memory_import.import_graph(svc, parsed, scope_path=project)
    return mcp_memory.to_jsonl(mcp_memory.export_graph(svc))


def test_fixture_round_trip_is_lossless_and_idempotent(svc: MemoryService, project: Path) -> None:
    text = fixture_text()
    exported = round_trip(svc, project, text)
    assert lines(exported) == lines(text)
    assert exported == text.rstrip("\n")  # same bytes: key order, no trailing newline
    slugs = slugs_of(svc)
    assert len(slugs) == 5  # 3 observations + 2 relations, one memory each

    again = mcp_memory_import.import_graph(
        svc, mcp_memory_import.parse_jsonl(text), scope_path=project
    )
    assert (again.entities_created, again.observations_added, again.relations_added) == (0, 0, 0)
    assert slugs_of(svc) == slugs
    assert mcp_memory.to_jsonl(mcp_memory.export_graph(svc)) == exported


def test_import_writes_in_batches_not_one_write_per_line(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the daemon each write is a request: one per line ran 3 lines a second."""
    entities = [
        {"type": "entity", "name": f"svc-{i}", "entityType": "service", "observations": [f"o{i}"]}
        for i in range(40)
    ]
    relations = [
        {"type": "relation", "from": f"svc-{i}", "to": f"svc-{i + 1}", "relationType": "calls"}
        for i in range(39)
    ]
    text = "\n".join(json.dumps(line) for line in entities + relations)
    calls: list[int] = []
    many = svc.record_graph_facts_brief
    monkeypatch.setattr(svc, "record_graph_facts", lambda *a, **k: calls.append(1))

    def counted(facts):
        calls.append(len(facts))
        return many(facts)

    monkeypatch.setattr(svc, "record_graph_facts_brief", counted)
    report = mcp_memory_import.import_graph(
        svc, mcp_memory_import.parse_jsonl(text), scope_path=project
    )
    assert calls == [79]  # one batch, no single writes
    assert (report.observations_added, report.relations_added) == (40, 39)
    exported = mcp_memory.export_graph(svc)
    assert len(exported["entities"]) == 40
    assert len(exported["relations"]) == 39


def test_types_outside_memoryd_vocabulary_survive(svc: MemoryService, project: Path) -> None:
    exported = round_trip(svc, project, TRICKY)
    assert lines(exported) == lines(TRICKY)
    # memoryd's own graph uses its vocabulary; the original names live in tags and labels
    rows = svc.cypher("MATCH (e:Entity) RETURN e.name, e.type ORDER BY e.name").rows
    assert dict((n, t) for n, t in rows) == {
        "Alpha": "person",
        "ghost": "concept",
        "mid": "tool",
        "zeta": "concept",
    }
    # a predicate written another way maps to it; anything else is `mentions`; the edge keeps
    # the original name as its label whenever it differs from the predicate's
    preds = svc.cypher(
        "MATCH (:Entity)-[r:RELATES]->(:Entity) RETURN r.predicate, r.label"
        " ORDER BY r.predicate, r.label"
    ).rows
    assert preds == [
        ["mentions", "inspired by"],
        ["mentions", "knows"],
        ["uses", "USES"],
        ["uses", None],
    ]
    again = mcp_memory_import.import_graph(
        svc, mcp_memory_import.parse_jsonl(TRICKY), scope_path=project
    )
    assert (again.entities_created, again.observations_added, again.relations_added) == (0, 0, 0)
    assert lines(mcp_memory.to_jsonl(mcp_memory.export_graph(svc))) == lines(TRICKY)


def test_reimport_of_a_grown_file_adds_only_the_new_lines(
    svc: MemoryService, project: Path
) -> None:
    text = fixture_text()
    round_trip(svc, project, text)
    grown = lines(text)
    grown[0]["observations"].append("Has a daemon")
    grown.append({"type": "relation", "from": "abble", "to": "Solid", "relationType": "likes"})
    new_text = "\n".join(json.dumps(line) for line in grown)
    report = mcp_memory_import.import_graph(
        svc, mcp_memory_import.parse_jsonl(new_text), scope_path=project
    )
    assert (report.observations_added, report.relations_added) == (1, 1)
    assert lines(mcp_memory.to_jsonl(mcp_memory.export_graph(svc))) == grown


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"type": "entity", "entityType": "x", "observations": []}', "`name`"),
        ('{"type": "entity", "name": "n", "entityType": "x", "observations": "o"}', "list of"),
        ('{"type": "relation", "from": "a", "to": "b"}', "`relationType`"),
        ('{"type": "entity", "x": ' + "[" * 200_000 + "]" * 200_000 + "}", "deeper than 64"),
    ],
)
def test_malformed_line_names_its_number(bad: str, message: str) -> None:
    text = '{"type":"entity","name":"a","entityType":"x","observations":[]}\n\n' + bad
    with pytest.raises(InvalidInput) as info:
        mcp_memory_import.parse_jsonl(text, source="g.jsonl")
    assert "g.jsonl line 3" in info.value.message
    assert message in info.value.message


def test_lines_of_other_types_are_ignored() -> None:
    parsed = mcp_memory_import.parse_jsonl(
        '{"name":"memorix-style","entityType":"x"}\n{"type":"x"}'
    )
    assert parsed.entities == []
    assert parsed.ignored_lines == [1, 2]


def test_cli_import_export(home: Path, project: Path, tmp_path: Path) -> None:
    text = fixture_text()
    source = tmp_path / "memory.jsonl"
    source.write_text(text, encoding="utf-8")
    args = ["import", "mcp-memory", str(source), "--scope", str(project), "--home", str(home)]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "entities_created": 3,
        "observations_added": 3,
        "relations_added": 2,
        "ignored_lines": [],
        "superseded": 0,
    }
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["export", "mcp-memory", "--output", str(out), "--home", str(home)])
    assert result.exit_code == 0, result.stderr
    assert out.read_text(encoding="utf-8") == text.rstrip("\n")
    result = runner.invoke(app, ["export", "mcp-memory", "--home", str(home)])
    assert result.exit_code == 0, result.stderr
    assert lines(result.stdout) == lines(text)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert "0 new entities, 0 observations, 0 relations" in result.stdout

    source.write_text(text + '\n{"type":"entity","name":', encoding="utf-8")
    result = runner.invoke(app, args)
    assert result.exit_code != 0
    assert "line 6" in result.stderr


def test_import_judges_supersedes_as_a_write_does_and_reports_them(
    svc: MemoryService, project: Path
) -> None:
    """An observation that replaces an earlier one of the same entity supersedes it, as the
    same text recorded by hand would (issue 27: imports judge like single writes)."""
    graph = json.dumps(
        {
            "type": "entity",
            "name": "web-app",
            "entityType": "project",
            "observations": [
                "Unit tests run with Jest.",
                "Unit tests now use Vitest instead of Jest.",
            ],
        }
    )
    report = mcp_memory_import.import_graph(
        svc, mcp_memory_import.parse_jsonl(graph), scope_path=project
    )
    assert report.superseded == 1
    rows = svc.cypher(
        "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) RETURN n.body, o.body, r.judge, r.status"
    ).rows
    assert rows == [
        [
            "web-app: Unit tests now use Vitest instead of Jest.",
            "web-app: Unit tests run with Jest.",
            "rule:instead-of",
            "active",
        ]
    ]


def test_cli_import_says_how_many_it_superseded(home: Path, project: Path, tmp_path: Path) -> None:
    source = tmp_path / "more.jsonl"
    source.write_text(
        json.dumps(
            {
                "type": "entity",
                "name": "api",
                "entityType": "project",
                "observations": ["Packages install with npm.", "We switched from npm to pnpm."],
            }
        ),
        encoding="utf-8",
    )
    args = ["import", "mcp-memory", str(source), "--scope", str(project), "--home", str(home)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert "they supersede 1 older memories" in result.stdout


def test_an_import_builds_the_next_batch_while_the_last_one_is_written(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26 item 9: through the daemon the client and the daemon took turns (wall = the
    sum of both). While batch 1 is being written, batch 2's facts are made; batch 2 is sent
    only once batch 1 is written (ordering and stopping: test_small_writes)."""
    import threading

    entities = [
        {"type": "entity", "name": f"svc-{i}", "entityType": "service", "observations": [f"o{i}"]}
        for i in range(30)
    ]
    text = "\n".join(json.dumps(line) for line in entities)
    monkeypatch.setattr(mcp_memory_import, "IMPORT_BATCH", 10)
    made = mcp_memory.observation_facts
    second_made = threading.Event()

    def observed(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "svc-15":  # a fact of the second batch
            second_made.set()
        return made(name, *args, **kwargs)

    monkeypatch.setattr(mcp_memory_import, "observation_facts", observed)
    many = svc.record_graph_facts_brief
    seen: list[tuple[int, bool]] = []

    def write(facts: Any) -> Any:
        if not seen:  # the first batch: its writing waits for the next one to be made
            seen.append((len(facts), second_made.wait(10)))
        else:
            seen.append((len(facts), True))
        return many(facts)

    monkeypatch.setattr(svc, "record_graph_facts_brief", write)
    report = mcp_memory_import.import_graph(
        svc, mcp_memory_import.parse_jsonl(text), scope_path=project
    )
    assert seen == [(10, True), (10, True), (10, True)]
    assert report.observations_added == 30
    names = {e["name"] for e in mcp_memory.export_graph(svc)["entities"]}
    assert names == {f"svc-{i}" for i in range(30)}
