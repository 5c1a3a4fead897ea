"""The digest as rich renderables (`memoryd digest`; the bench times it too). Apart from
`cli.digest` (which imports it when it renders), so a test or the bench can import it
first."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.text import Text

from memoryd.cli.output import printable
from memoryd.governance.digest import Digest


def _heading(title: str, total: int, shown: int) -> Rule:
    more = f", {shown} shown" if shown < total else ""
    return Rule(Text(f"{title} ({total}{more})", style="bold"), align="left")


def render(d: Digest) -> RenderableType:
    """The digest as rich renderables: every section that has something, trends when a
    trends report is attached."""
    parts: list[RenderableType] = []
    where = f" · scope {d.scope_hash}" if d.scope_hash else ""
    parts.append(Text(f"memoryd digest · {d.at:%Y-%m-%d %H:%M} UTC{where}", style="bold"))
    if d.empty:
        parts.append(Text("Nothing waits for a decision and nothing fades this week."))
    if d.promotions:
        parts.append(_heading("Pending promotions", d.totals["promotions"], len(d.promotions)))
        for p in d.promotions:
            s = p.dura
            line = Text(f"#{p.id} ", style="bold")
            line.append(f"{p.proposed_type.value}: {printable(p.proposed_title)}")
            parts.append(line)
            parts.append(
                Text(
                    f"  DURA D {s.D:.2f} U {s.U:.2f} R {s.R:.2f} A {s.A:.2f} = {s.mean:.2f}"
                    f" by {s.by or 'unknown'} · from {p.source_slug}"
                )
            )
            parts += [Text(f"  > {printable(q)}", style="italic") for q in p.evidence]
        parts.append(Text("  memoryd promote ID · memoryd reject ID", style="dim"))
    if d.supersede_candidates:
        parts.append(
            _heading("Supersede candidates", d.totals["supersede"], len(d.supersede_candidates))
        )
        for r in d.supersede_candidates:
            line = Text(f"{r.newer} → {r.older}  {r.confidence:.2f}")
            if r.judge:
                line.append(f"  {r.judge}", style="dim")
            parts.append(line)
            if r.reason:
                parts.append(Text(f"  {printable(r.reason)}"))
        parts.append(Text("  memoryd supersede accept|reject NEW OLD", style="dim"))
    if d.duplicates:
        parts.append(_heading("Duplicate pairs", d.totals["duplicates"], len(d.duplicates)))
        for pair in d.duplicates:
            parts.append(
                Text(
                    f"{pair.keep} ≈ {pair.drop}  {pair.kind} {pair.similarity:.2f}\n"
                    f"  {printable(pair.keep_title)} / {printable(pair.drop_title)}"
                )
            )
        parts.append(Text("  memoryd merge --keep KEEP --drop DROP", style="dim"))
    if d.fading:
        parts.append(_heading(f"Fading within {d.days} days", d.totals["fading"], len(d.fading)))
        for f in d.fading:
            when = (
                f"at the next sweep (due {f.due_at:%Y-%m-%d})"
                if f.due_at <= d.at
                else f"on {f.due_at:%Y-%m-%d}"
            )
            parts.append(
                Text(
                    f"{f.slug}  {f.from_state.value} → {f.to_state.value} {when}\n"
                    f"  {printable(f.title)}"
                )
            )
        parts.append(Text("  a recall or `memoryd get SLUG` keeps one alive", style="dim"))
    if d.trends is not None:
        parts.append(Rule(Text(d.trends.title, style="bold"), align="left"))
        parts += [Text(printable(line)) for line in d.trends.lines]
    parts += [Text(f"note: {printable(n)}", style="dim") for n in d.notes]
    return Group(*parts)
