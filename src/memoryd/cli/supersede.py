"""`memoryd supersede …`: the candidates supersede judging left for a human, and decisions.

    memoryd supersede list [--scope P]       candidates waiting (judged 0.5–0.85)
    memoryd supersede list --auto            automatic decisions: rule, version, evidence
    memoryd supersede accept NEW OLD         the older memory is superseded from now on
    memoryd supersede reject NEW OLD         both stay current; the pair is not proposed again
    memoryd supersede undo NEW OLD           an active supersede (automatic or not) is undone
    memoryd supersede judge SLUG             judge a memory again (rules, then the LLM)

Exit codes as everywhere: 3 when a slug or the pair's decision does not exist, 4 when the
decision is not in the state the action needs (deciding twice).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, ScopeOpt
from memoryd.cli.output import emit_json, print_table
from memoryd.cli.running import run

if TYPE_CHECKING:
    from memoryd.models import SupersedeDecision

supersede_app = typer.Typer(
    help="Supersede judging: review candidates, accept, reject or undo decisions.",
    no_args_is_help=True,
)

NewArg = Annotated[str, typer.Argument(help="Slug of the newer memory (the one that replaces).")]
OldArg = Annotated[str, typer.Argument(help="Slug of the older memory (the one replaced).")]
DigestOpt = Annotated[
    bool, typer.Option("--digest", help="Record the decision as made in the digest review.")
]


AutoOpt = Annotated[
    bool,
    typer.Option(
        "--auto",
        help="List the automatic decisions (active and candidates) with the rule that made"
        " each, its version and its evidence, instead of the candidates waiting.",
    ),
]


@supersede_app.command("list")
def supersede_list(
    scope: ScopeOpt = None, home: HomeOpt = None, as_json: JsonOpt = False, auto: AutoOpt = False
) -> None:
    """Supersede candidates waiting for a decision, most confident first (--auto: the
    automatic decisions, newest first)."""
    if auto:
        rows = run(home, lambda svc: svc.automatic_supersedes(scope))
    else:
        rows = run(home, lambda svc: svc.supersede_candidates(scope))
    if as_json:
        emit_json(rows)
        return
    if not rows:
        typer.echo("no automatic supersedes" if auto else "no supersede candidates")
        return
    if auto:
        print_table(
            ["newer", "older", "status", "confidence", "judge", "rules", "evidence"],
            [
                [
                    r.newer,
                    r.older,
                    r.status,
                    f"{r.confidence:.2f}",
                    r.judge or "",
                    "" if r.rules is None else str(r.rules),
                    r.reason or "",
                ]
                for r in rows
            ],
            wrap=("evidence",),
        )
        return
    print_table(
        ["newer", "older", "confidence", "judge", "reason"],
        [[r.newer, r.older, f"{r.confidence:.2f}", r.judge or "", r.reason or ""] for r in rows],
        wrap=("reason",),
    )


def _decide(
    action: Literal["undo", "accept", "reject"],
    newer: str,
    older: str,
    home: HomeOpt,
    digest: bool,
    as_json: bool,
) -> None:
    by = "digest" if digest else "user"
    decision = run(home, lambda svc: svc.decide_supersede(newer, older, action, by=by))
    if as_json:
        emit_json(decision)
    else:
        typer.echo(_describe(newer, decision))


def _describe(newer: str, d: SupersedeDecision) -> str:
    return f"{newer} → {d.older}: {d.status.value} (decided by {d.decided_by})"


@supersede_app.command("accept")
def supersede_accept(
    newer: NewArg,
    older: OldArg,
    home: HomeOpt = None,
    digest: DigestOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Accept a candidate: NEW supersedes OLD, and recall ranks OLD below it."""
    _decide("accept", newer, older, home, digest, as_json)


@supersede_app.command("reject")
def supersede_reject(
    newer: NewArg,
    older: OldArg,
    home: HomeOpt = None,
    digest: DigestOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Reject a candidate: both memories stay current and the pair is not proposed again."""
    _decide("reject", newer, older, home, digest, as_json)


@supersede_app.command("undo")
def supersede_undo(
    newer: NewArg,
    older: OldArg,
    home: HomeOpt = None,
    digest: DigestOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Undo an active supersede: OLD is current again (the decision is kept as history)."""
    _decide("undo", newer, older, home, digest, as_json)


@supersede_app.command("judge")
def supersede_judge(
    slug: Annotated[str, typer.Argument(help="The memory to judge against older ones.")],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Judge whether a memory replaces older ones of its scope that share an entity with it."""
    decisions = run(home, lambda svc: svc.judge_supersedes(slug))
    if as_json:
        emit_json(decisions)
    elif not decisions:
        typer.echo(f"{slug}: no new supersede decision")
    else:
        for d in decisions:
            typer.echo(f"{_describe(slug, d)}, confidence {d.confidence:.2f}: {d.reason or ''}")


def register(app: typer.Typer) -> None:
    app.add_typer(supersede_app, name="supersede")
