"""Review commands: analyze-session, promotions, promote, reject (issue 15, seeds/004)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.text import Text

from memoryd.cli.options import LIMIT_HELP, HomeOpt, JsonOpt, ScopeOpt, path_param, utf8_option
from memoryd.cli.output import emit_json, err, fail, out, printable
from memoryd.cli.running import Service, run
from memoryd.errors import InvalidInput, MemorydError
from memoryd.models import MemoryType

if TYPE_CHECKING:
    from memoryd.governance.analyze import AnalysisMode
    from memoryd.models import Promotion

StatusOpt = Literal["pending", "approved", "rejected", "merged", "all"]


def analyze_session(
    slug: Annotated[str, typer.Argument(help="The session memory's slug.")],
    llm: Annotated[bool, typer.Option("--llm", help="Score with the configured LLM.")] = False,
    heuristic: Annotated[
        bool, typer.Option("--heuristic", help="Score offline with heuristic-v1.")
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Score one session memory on DURA again and write the score into its frontmatter; a
    mean at or above governance.dura_threshold queues a promotion. Without a flag: the LLM
    when one is configured, else heuristic-v1. A failed LLM call leaves it queued."""
    if llm and heuristic:
        raise fail(InvalidInput("--llm and --heuristic exclude each other", hint="pick one"))
    mode: AnalysisMode = "llm" if llm else "heuristic" if heuristic else "auto"
    report = run(home, lambda svc: svc.analyze_session(slug, mode=mode))
    if as_json:
        emit_json(report)
        return
    d = report.dura
    out.print(
        f"{report.slug}: D {d.D:.2f} U {d.U:.2f} R {d.R:.2f} A {d.A:.2f}, mean {d.mean:.2f}"
        f" (threshold {report.threshold:.2f}) by {d.by}",
        markup=False,
    )
    if report.promotion_id is None:
        out.print("below the threshold: no promotion proposed", markup=False)
    elif report.queue == "decided":
        out.print(
            f"promotion {report.promotion_id} already decided this content: nothing queued",
            markup=False,
        )
    else:
        verb = "queued" if report.queue == "new" else "refreshed"
        out.print(
            f"{verb} promotion {report.promotion_id}: {report.proposal.proposed_type.value}"
            f" “{printable(report.proposal.proposed_title)}” — `memoryd promote"
            f" {report.promotion_id}` or `memoryd reject {report.promotion_id}`",
            markup=False,
        )


def promotions(
    status: Annotated[
        StatusOpt, typer.Option("--status", help="Which promotions (all: every status).")
    ] = "pending",
    scope: ScopeOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-k", min=1, help=LIMIT_HELP)] = 50,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The promotions queue with its evidence: scores and who scored, the source session,
    the quoted sentences, the proposed long-term memory."""
    wanted = None if status == "all" else status
    rows = run(home, lambda svc: svc.list_promotions(status=wanted, scope=scope, limit=limit))
    if as_json:
        emit_json(rows)
        return
    if not rows:
        err.print(f"no {'' if wanted is None else wanted + ' '}promotions", markup=False)
        return
    for promotion in rows:
        _show(promotion)


def _show(p: Promotion) -> None:
    d = p.dura
    head = Text(f"#{p.id} ", style="bold")
    head.append(f"{p.status}  ")
    head.append(f"{p.proposed_type.value}: {printable(p.proposed_title)}", style="bold")
    out.print(head)
    out.print(
        f"  DURA D {d.D:.2f} U {d.U:.2f} R {d.R:.2f} A {d.A:.2f} = {d.mean:.2f}"
        f" by {d.by or 'unknown'} · scope {p.scope_hash} · {p.created_at:%Y-%m-%d %H:%M}",
        markup=False,
    )
    out.print(f"  from {p.source_slug} “{printable(p.source_title)}”", markup=False)
    if p.source_missing_at is not None:
        out.print(
            f"  ! the source session was deleted (noticed {p.source_missing_at:%Y-%m-%d %H:%M})",
            markup=False,
        )
    for quote in p.evidence:
        out.print(f"  > {printable(quote)}", markup=False)
    if p.proposed_triggers:
        out.print(f"  triggers: {printable(', '.join(p.proposed_triggers))}", markup=False)
    if p.proposed_supersedes:
        out.print(f"  supersedes: {', '.join(p.proposed_supersedes)}", markup=False)
    if p.status != "pending":
        what = f"  {p.status} by {p.decided_by or '?'} at {p.decided_at}"
        if p.promoted_slug:
            what += f" → {p.promoted_slug}"
        if p.decision_reason:
            what += f": {printable(p.decision_reason)}"
        out.print(what, markup=False)
    out.print("")


def _body_file(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(
            f"--body-file {path}: {exc.strerror or exc}", hint="give a readable text file"
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"--body-file {path} is not UTF-8 text (byte {exc.start})",
            hint="re-encode it as UTF-8",
        ) from exc
    if not text.strip():
        raise InvalidInput(f"--body-file {path} is empty", hint="write the memory's body in it")
    return text


def promote(
    promotion_id: Annotated[int, typer.Argument(help="The promotion's id (`memoryd promotions`).")],
    type: Annotated[
        MemoryType | None, typer.Option("--type", help="Another long-term type than proposed.")
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="Another title.")] = None,
    body_file: Annotated[
        Path | None,
        typer.Option(
            "--body-file", help="A file with the body to write instead.", callback=path_param
        ),
    ] = None,
    team: Annotated[
        bool,
        typer.Option(
            "--team",
            help="Share it with the team too, with its supersedes chain (a shared project,"
            " after `memoryd team join`).",
        ),
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve a promotion: write the long-term memory (promoted_from the session), index it
    with a PROMOTED_FROM edge, record the decision. A session captured in a shared project
    stays personal until then; `--team` also shares what is promoted. Exit 3: unknown id;
    4: already decided."""
    try:
        body = _body_file(body_file)
        new_title = utf8_option(title, "--title") if title is not None else None
    except MemorydError as exc:
        raise fail(exc) from exc
    from memoryd.cli.team import member_of

    member = member_of(home) if team else None

    def approve(svc: Service) -> tuple[Promotion, str | None]:
        decided = svc.promote(promotion_id, type=type, title=new_title, body=body)
        if member is None or decided.promoted_slug is None:
            return decided, None
        from memoryd.team_member.share import not_shared, share

        try:
            report = share(svc, member, [decided.promoted_slug], None)
        except MemorydError as exc:
            raise not_shared(decided.promoted_slug, exc) from exc
        return decided, next(c for s, _, _, c in report.rows if s == decided.promoted_slug)

    decided, copy = run(home, approve)
    if as_json:
        emit_json({**decided.model_dump(mode="json"), **({"team_slug": copy} if team else {})})
    else:
        typer.echo(decided.promoted_slug)
        if copy:
            typer.echo(f"shared with the team as {copy}", err=True)


def reject(
    promotion_id: Annotated[int, typer.Argument(help="The promotion's id (`memoryd promotions`).")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why, for the record.")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reject a promotion: the session stays a session. Exit 3: unknown id; 4: already decided."""
    try:
        why = utf8_option(reason, "--reason") if reason is not None else None
    except MemorydError as exc:
        raise fail(exc) from exc
    decided = run(home, lambda svc: svc.reject(promotion_id, reason=why))
    if as_json:
        emit_json(decided)
    else:
        typer.echo(f"rejected promotion {decided.id} ({decided.source_slug})")


def register(app: typer.Typer) -> None:
    app.command("analyze-session")(analyze_session)
    app.command("promotions")(promotions)
    app.command("promote")(promote)
    app.command("reject")(reject)
