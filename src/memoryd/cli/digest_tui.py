"""`memoryd digest --tui`: walk the review queue and decide with single keys.

The queue is the digest's pending promotions, supersede candidates and duplicate pairs, in
that order. Keys: a approve (promote · accept the supersede · merge the pair), r reject
(reject the promotion · reject the supersede), m merge (a duplicate pair, keeping the first,
older one), s skip, j/k down/up, q quit. Each decision calls the same `MemoryAPI` method the
CLI commands call (`promote`, `reject`, `decide_supersede(by="digest")`, `merge`), so it is
audited the same way; an error (an id decided or deleted meanwhile) is shown on the status
line and the item stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memoryd.errors import MemorydError, MissingExtra

try:
    from textual.app import App, ComposeResult
    from textual.binding import Binding
    from textual.widgets import DataTable, Footer, Static
except ImportError as exc:  # the base install leaves it out
    raise MissingExtra("memoryd digest --tui", "tui", exc.name or "textual") from exc
from memoryd.governance.digest import Digest
from memoryd.governance.merge import DuplicatePair
from memoryd.governance.supersede import SupersedeAction
from memoryd.graph.store import SupersedeRow
from memoryd.models import Promotion
from memoryd.protocol import MemoryAPI

Kind = Literal["promotion", "supersede", "duplicate"]


@dataclass
class QueueItem:
    """One row of the queue: what it is, and what was decided on it here."""

    kind: Kind
    item: Promotion | SupersedeRow | DuplicatePair
    state: str = "pending"

    @property
    def key(self) -> str:
        item = self.item
        if isinstance(item, Promotion):
            return f"promotion:{item.id}"
        if isinstance(item, SupersedeRow):
            return f"supersede:{item.newer}:{item.older}"
        return f"duplicate:{item.keep}:{item.drop}"

    @property
    def label(self) -> str:
        item = self.item
        if isinstance(item, Promotion):
            return f"#{item.id} {item.proposed_type.value}: {item.proposed_title}"
        if isinstance(item, SupersedeRow):
            return f"{item.newer} → {item.older} ({item.confidence:.2f})"
        return f"{item.keep} ≈ {item.drop} ({item.kind} {item.similarity:.2f})"

    @property
    def detail(self) -> str:
        item = self.item
        if isinstance(item, Promotion):
            d = item.dura
            lines = [
                f"promotion #{item.id} from {item.source_slug}: {item.source_title}",
                f"DURA D {d.D:.2f} U {d.U:.2f} R {d.R:.2f} A {d.A:.2f} = {d.mean:.2f}"
                f" by {d.by or 'unknown'}",
                *(f"> {quote}" for quote in item.evidence),
                "",
                item.proposed_body,
                "",
                "a: promote · r: reject",
            ]
        elif isinstance(item, SupersedeRow):
            lines = [
                f"{item.newer} may replace {item.older}",
                f"confidence {item.confidence:.2f} · {item.judge or 'a person'}",
                item.reason or "",
                "",
                "a: accept (the older is superseded) · r: reject (both stay current)",
            ]
        else:
            lines = [
                f"keep {item.keep}: {item.keep_title}",
                f"drop {item.drop}: {item.drop_title}",
                f"{item.kind}, similarity {item.similarity:.2f}",
                "",
                "m (or a): merge into the first, older one · s: skip",
            ]
        return "\n".join(lines)


def queue(digest: Digest) -> list[QueueItem]:
    """The digest's decisions, in the order the page lists them."""
    return [
        *(QueueItem("promotion", p) for p in digest.promotions),
        *(QueueItem("supersede", r) for r in digest.supersede_candidates),
        *(QueueItem("duplicate", pair) for pair in digest.duplicates),
    ]


class DigestApp(App[None]):
    """The review queue as a table, the selected item's evidence below it."""

    TITLE = "memoryd digest"
    CSS = """
    #queue { height: 1fr; }
    #detail { height: auto; max-height: 50%; border-top: solid $accent; padding: 0 1; }
    #status { height: 1; padding: 0 1; }
    """
    BINDINGS = [  # noqa: RUF012 (textual's own declaration style)
        Binding("a", "approve", "approve"),
        Binding("r", "reject", "reject"),
        Binding("m", "merge", "merge"),
        Binding("s", "skip", "skip"),
        Binding("j", "down", "down", show=False),
        Binding("k", "up", "up", show=False),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, api: MemoryAPI, digest: Digest) -> None:
        super().__init__()
        self.api = api
        self.items = queue(digest)

    def compose(self) -> ComposeResult:
        yield DataTable(id="queue", cursor_type="row", zebra_stripes=True)
        yield Static(id="detail")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#queue", DataTable)
        table.add_column("state", key="state")
        table.add_column("kind", key="kind")
        table.add_column("item", key="item")
        for entry in self.items:
            table.add_row(entry.state, entry.kind, entry.label, key=entry.key)
        if not self.items:
            self.say("nothing waits for a decision: q quits")
        self._show_detail()

    # -- helpers --------------------------------------------------------------------------
    @property
    def current(self) -> QueueItem | None:
        table = self.query_one("#queue", DataTable)
        if not self.items:
            return None
        return self.items[min(table.cursor_row, len(self.items) - 1)]

    @property
    def status(self) -> str:
        return str(self.query_one("#status", Static).content)

    def say(self, message: str) -> None:
        self.query_one("#status", Static).update(message)

    def _show_detail(self) -> None:
        entry = self.current
        self.query_one("#detail", Static).update(entry.detail if entry else "")

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def _move(self, step: int) -> None:
        table = self.query_one("#queue", DataTable)
        if self.items:
            table.move_cursor(row=max(0, min(len(self.items) - 1, table.cursor_row + step)))
        self._show_detail()

    def _decide(self, verb: str, entry: QueueItem) -> None:
        """Call the service; mark the row and go to the next one, or say what went wrong."""
        if entry.state != "pending":
            self.say(f"{entry.key} was {entry.state} already")
            return
        item = entry.item
        try:
            if isinstance(item, Promotion):
                if verb == "approve":
                    done = self.api.promote(item.id)
                    outcome = f"promoted as {done.promoted_slug}"
                else:
                    self.api.reject(item.id, reason="rejected in the digest")
                    outcome = "rejected"
            elif isinstance(item, SupersedeRow):
                action: SupersedeAction = "accept" if verb == "approve" else "reject"
                decision = self.api.decide_supersede(item.newer, item.older, action, by="digest")
                outcome = f"{action}ed ({decision.status.value})"
            else:
                merged = self.api.merge(item.keep, [item.drop])
                outcome = f"merged into {merged.keep}"
        except MemorydError as exc:
            hint = f" (hint: {exc.hint})" if exc.hint else ""
            self.say(f"error: {exc.message}{hint}")
            return
        entry.state = outcome.split(" ", 1)[0]
        table = self.query_one("#queue", DataTable)
        table.update_cell(entry.key, "state", entry.state)
        self.say(f"{entry.key}: {outcome}")
        self._move(1)

    # -- actions --------------------------------------------------------------------------
    def action_approve(self) -> None:
        if (entry := self.current) is not None:
            self._decide("approve", entry)

    def action_reject(self) -> None:
        entry = self.current
        if entry is None:
            return
        if entry.kind == "duplicate":
            self.say("a duplicate pair has no reject: m merges it, s skips it")
            return
        self._decide("reject", entry)

    def action_merge(self) -> None:
        entry = self.current
        if entry is None:
            return
        if entry.kind != "duplicate":
            self.say("m merges duplicate pairs; here a approves and r rejects")
            return
        self._decide("merge", entry)

    def action_skip(self) -> None:
        self._move(1)

    def action_down(self) -> None:
        self._move(1)

    def action_up(self) -> None:
        self._move(-1)
