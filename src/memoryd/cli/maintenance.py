"""Governance maintenance: decay-sweep, restore, merge, duplicates, schedule."""

from __future__ import annotations

from typing import Annotated

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, ScopeOpt
from memoryd.cli.output import emit_json, out, print_table, printable
from memoryd.cli.running import run


def decay_sweep(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would move; change nothing.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move unused session memories along alive → dim → soft-forgotten → forgotten.

    Idle time counts from the last recall (or creation); thresholds are `[decay]` in the
    config (90 / 30 / 90 days; a memory's ttl_days replaces the first). Long-term memories
    never decay. Forgotten files move to forgotten/ and leave the graph and the index;
    `memoryd restore SLUG` brings one back. The daemon runs this daily at 03:00."""
    from memoryd.cli.progress import progress_bar
    from memoryd.governance.decay import SWEEP_STEPS

    with progress_bar("decay sweep", quiet=as_json, steps=SWEEP_STEPS) as progress:
        report = run(home, lambda svc: svc.decay_sweep(dry_run=dry_run, progress=progress))
    if as_json:
        emit_json({**report.model_dump(mode="json"), "counts": report.counts})
        return
    verb = "would move" if dry_run else "moved"
    if not report.moved:
        out.print(f"nothing to move ({report.checked} checked)", markup=False)
    else:
        print_table(
            ["slug", "from", "to", "idle days", "title"],
            [
                [m.slug, m.from_state.value, m.to_state.value, str(m.idle_days), m.title]
                for m in report.moved
            ],
        )
        counts = ", ".join(f"{state} {n}" for state, n in report.counts.items() if n)
        out.print(f"{verb}: {counts}", markup=False)
    for slug, why in report.skipped.items():
        out.print(printable(f"skipped {slug}: {why}"), markup=False)


def restore(
    slug: Annotated[str, typer.Argument(help="The forgotten memory's slug.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bring a forgotten (or dim, soft-forgotten) memory back to alive; its idle clock
    restarts. Exit 3 for an unknown slug, 4 when it is alive already."""
    result = run(home, lambda svc: svc.restore(slug))
    if as_json:
        emit_json(result)
    else:
        out.print(f"restored {result.slug} (was {result.from_state.value})", markup=False)


def merge(
    keep: Annotated[str, typer.Option("--keep", help="The memory that stays.")],
    drop: Annotated[list[str], typer.Option("--drop", help="A memory folded into it (repeat).")],
    more: Annotated[list[str] | None, typer.Argument(help="More memories to drop.")] = None,
    across_scopes: Annotated[
        bool, typer.Option("--across-scopes", help="Allow memories of different scopes.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fold duplicates into one memory: tags, triggers, entity mentions, relations,
    supersedes edges, recall counts and pending promotions move to --keep; the dropped
    memories are archived (forgotten/, `merged_into`). Exit 3 for an unknown slug."""
    drops = [*drop, *(more or [])]
    result = run(home, lambda svc: svc.merge(keep, drops, across_scopes=across_scopes))
    if as_json:
        emit_json(result)
        return
    out.print(f"merged {', '.join(result.dropped)} into {result.keep}", markup=False)
    out.print(
        f"tags {len(result.tags)}, triggers {len(result.triggers)}, entities"
        f" {result.observations}, relations {result.relations}, recall count"
        f" {result.recall_count}",
        markup=False,
    )
    if result.repointed:
        out.print(f"supersedes re-pointed in: {', '.join(result.repointed)}", markup=False)
    if result.promotions_merged:
        ids = ", ".join(str(i) for i in result.promotions_merged)
        out.print(f"promotions marked merged: {ids}", markup=False)


def duplicates(
    scope: ScopeOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Candidate pairs to merge: equal fingerprints (same start of body) and
    near-duplicates (shingle Jaccard ≥ 0.8), per scope, the older one to keep."""
    pairs = run(home, lambda svc: svc.duplicates(scope=scope))
    if as_json:
        emit_json(pairs)
        return
    if not pairs:
        out.print("no duplicates", markup=False)
        return
    print_table(
        ["keep", "drop", "kind", "similarity", "titles"],
        [
            [p.keep, p.drop, p.kind, f"{p.similarity:.2f}", f"{p.keep_title} | {p.drop_title}"]
            for p in pairs
        ],
    )
    out.print("fold one into the other: memoryd merge --keep KEEP --drop DROP", markup=False)


def schedule(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """The maintenance jobs the daemon runs (and `setup auto-install` installs): when,
    the last run and the next one."""
    jobs = run(home, lambda svc: svc.schedule())
    if as_json:
        emit_json(jobs)
        return

    def stamp(value: object) -> str:
        return "" if value is None else str(value)[:16].replace("T", " ")

    print_table(
        ["job", "when", "last run", "outcome", "next run"],
        [
            [
                j.name,
                j.when,
                stamp(j.last_started) or ("—" if j.built else ""),
                j.last_outcome or j.note,
                stamp(j.next_run),
            ]
            for j in jobs
        ],
    )


def register(app: typer.Typer) -> None:
    app.command("decay-sweep")(decay_sweep)
    app.command()(restore)
    app.command()(merge)
    app.command()(duplicates)
    app.command()(schedule)
