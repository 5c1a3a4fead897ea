"""Knowledge-graph commands: recall, entity list|show|merge|alias, graph query|neighbors."""

from __future__ import annotations

import itertools
import json
from typing import Annotated

import typer
from rich.text import Text

from memoryd.cli.options import LIMIT_HELP, HomeOpt, JsonOpt, ScopeOpt
from memoryd.cli.output import emit_json, err, fail, out, print_table, printable, say_hidden
from memoryd.cli.running import run
from memoryd.errors import InvalidInput
from memoryd.models import RELEVANCE_NOTE, MemoryType

INJECT_MIN_SCORE = 0.12
"""`memoryd.recall.config.INJECT_MIN_SCORE`, for the help text: importing the recall package
loads the search index and the extraction pipeline, which `--help` should not wait for
(tests/unit/test_cli_startup.py holds the two equal)."""

entity_app = typer.Typer(help="Entities of the knowledge graph.", no_args_is_help=True)
graph_app = typer.Typer(help="Read-only access to the graph.", no_args_is_help=True)


def recall(
    query: Annotated[str, typer.Argument(help="What you want to remember (any language).")],
    scope: ScopeOpt = None,
    type: Annotated[list[MemoryType] | None, typer.Option("--type")] = None,
    k: Annotated[int, typer.Option("--limit", "-k", min=1, help=LIMIT_HELP)] = 10,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show matched terms and graph paths.")
    ] = False,
    include_forgotten: Annotated[bool, typer.Option("--include-forgotten")] = False,
    min_score: Annotated[
        float,
        typer.Option(
            "--min-score",
            min=0.0,
            max=1.0,
            help="Leave out hits whose relevance (0 to 1) is below this; inject uses"
            f" {INJECT_MIN_SCORE}.",
        ),
    ] = 0.0,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recall memories: full text and entity traversal fused, current decisions first."""
    result = run(
        home,
        lambda svc: svc.recall(
            query, scope=scope, types=type, k=k, include_forgotten=include_forgotten
        ),
    )
    result.hits = [hit for hit in result.hits if hit.score >= min_score]
    say_hidden(result.hidden)
    if as_json:
        emit_json(result)
        return
    if not result.hits:
        err.print("no memories match")
        return
    rows: list[list[str | Text]] = []
    team = any(hit.source for hit in result.hits)  # a daemon in a team merged the two
    for rank, hit in enumerate(result.hits, 1):
        title = Text(printable(hit.title))
        if hit.superseded_by:
            title.append(f"  (superseded by {hit.superseded_by})", style="dim")
        row: list[str | Text] = [str(rank), f"{hit.score:.3f}", hit.type.value, title, hit.slug]
        if team:
            row += [hit.source or "personal", printable(hit.recorded_by or "")]
        if explain:
            why = [f"stages: {', '.join(hit.stages)}"]
            if hit.matched_terms:
                why.append(f"terms: {', '.join(hit.matched_terms)}")
            why.extend(f"path: {p}" for p in hit.paths)
            if hit.factors:
                why.append(
                    "factors: " + ", ".join(f"{name} {v:g}" for name, v in hit.factors.items())
                )
            row.append("\n".join(why))
        rows.append(row)
    headers = ["#", "relevance", "type", "title", "slug"]
    headers += (["source", "recorded by"] if team else []) + (["why"] if explain else [])
    print_table(headers, rows, wrap=("title", "why"))
    if any(a.score < b.score for a, b in itertools.pairwise(result.hits)):
        err.print(RELEVANCE_NOTE, style="dim", markup=False)
    if explain and result.entities:
        out.print(printable(f"linked entities: {', '.join(result.entities)}"), markup=False)
    if explain:
        for note in result.notes:
            out.print(printable(note), markup=False)


@entity_app.command("list")
def entity_list(
    type: Annotated[str | None, typer.Option("--type", help="e.g. library, person")] = None,
    query: Annotated[str | None, typer.Option("--query", "-q", help="Name contains.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-k", min=1, help=LIMIT_HELP)] = 100,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List entities, most mentioned first; says so when there are more than --limit."""
    rows = run(home, lambda svc: svc.entities(type=type, query=query, limit=limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    if as_json:
        emit_json(rows)
    else:
        print_table(
            ["id", "type", "mentions", "aliases"],
            [[r.id, r.type, str(r.mention_count), ", ".join(r.aliases)] for r in rows],
            wrap=("aliases",),
        )
    if more:
        err.print(f"showing the first {limit} (--limit {limit}; raise it for more)", markup=False)


@entity_app.command("show")
def entity_show(
    entity: Annotated[str, typer.Argument(help="Entity id, name or alias.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """An entity, its relations and the memories about it (current ones first)."""
    context = run(home, lambda svc: svc.entity_context(entity))
    if as_json:
        emit_json(context)
        return
    e = context.entity
    out.print(printable(f"{e.id}  ({e.type}, {e.mention_count} mentions)"), markup=False)
    if e.aliases:
        out.print(printable(f"aliases: {', '.join(e.aliases)}"), markup=False)
    for src, predicate, dst, conf in context.relations:  # as stored: from -[predicate]-> to
        out.print(printable(f"  {src} -[{predicate} {conf:.2f}]-> {dst}"), markup=False)
    print_table(
        ["slug", "type", "title", "note"],
        [
            [m.slug, m.type.value, m.title, "superseded" if m.slug in context.superseded else ""]
            for m in context.memories
        ],
    )


@entity_app.command("merge")
def entity_merge(
    keep: Annotated[str, typer.Argument(help="The entity that stays.")],
    drop: Annotated[str, typer.Argument(help="The entity merged into it.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Merge two entities: edges move to KEEP, DROP's name becomes an alias."""
    merged = run(home, lambda svc: svc.merge_entities(keep, drop), writes=True)
    if as_json:
        emit_json(merged)
    else:
        typer.echo(f"merged into {merged.id}; aliases: {', '.join(merged.aliases)}")


@entity_app.command("alias")
def entity_alias(
    entity: Annotated[str, typer.Argument(help="Entity id, name or alias.")],
    alias: Annotated[str, typer.Argument(help="Another name for it.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add an alias so recall and extraction recognise another name."""
    updated = run(home, lambda svc: svc.alias_entity(entity, alias), writes=True)
    if as_json:
        emit_json(updated)
    else:
        typer.echo(f"{updated.id}: aliases {', '.join(updated.aliases)}")


@graph_app.command("query")
def graph_query(
    cypher: Annotated[str, typer.Argument(help="A read-only Cypher query.")],
    params: Annotated[
        str | None, typer.Option("--params", help='JSON object, e.g. {"slug": "…"}')
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-k", min=1, max=100_000, help=LIMIT_HELP)
    ] = 1000,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run read-only Cypher and print a table (or JSON). Write clauses are refused."""
    try:
        values = json.loads(params) if params else None
    except json.JSONDecodeError as exc:
        raise fail(InvalidInput(f"--params is not valid JSON: {exc.msg}")) from exc
    if values is not None and not isinstance(values, dict):
        raise fail(InvalidInput("--params must be a JSON object"))
    result = run(home, lambda svc: svc.cypher(cypher, values, limit=limit))
    if as_json:
        emit_json(result)
        return
    rows = [
        [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in row]
        for row in result.rows
    ]
    # Text wraps; a column of single words (ids, slugs) stays whole so it can be copied.
    prose = [c for i, c in enumerate(result.columns) if any(" " in row[i] for row in rows)]
    print_table(result.columns, rows, wrap=prose)
    if result.truncated:
        err.print(f"(first {limit} rows; raise --limit for more)")


@graph_app.command("neighbors")
def graph_neighbors(
    entity: Annotated[str, typer.Argument(help="Entity id, name or alias.")],
    depth: Annotated[int, typer.Option("--depth", min=1, max=3)] = 2,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Relations within DEPTH hops (fan-out capped at hubs), each as stored: FROM -[predicate]->
    TO, whichever end the walk came from."""
    result = run(home, lambda svc: svc.neighbors(entity, depth=depth))
    if as_json:
        emit_json(result)
        return
    print_table(
        result.columns,
        [[src, predicate, dst, f"{conf:.2f}"] for src, predicate, dst, conf in result.rows],
        wrap=(),
    )


def register(app: typer.Typer) -> None:
    app.command()(recall)
    app.add_typer(entity_app, name="entity")
    app.add_typer(graph_app, name="graph")
