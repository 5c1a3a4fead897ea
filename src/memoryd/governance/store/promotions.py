"""The promotions queue in governance.db: proposals from sessions, their decisions, and the
pending ones a merge settles (governance/promotions.py, governance/merge.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from memoryd.errors import Conflict, InvalidInput, NotFound
from memoryd.governance.store.base import StoreBase, _instant
from memoryd.models import Promotion, PromotionProposal, PromotionStatus

Proposed = Literal["new", "updated", "decided"]
"""What `propose_promotion` did: inserted a row, refreshed the source's pending one, or left
alone a promotion of exactly this content that was already decided."""


_PROMOTION_COLUMNS = (
    "id, source_session_slug, source_title, source_fingerprint, scope_hash, proposed_type,"
    " proposed_title, proposed_body, proposed_triggers, proposed_supersedes, dura_score,"
    " reasoning, evidence, status, created_at, decided_at, decided_by, decision_reason,"
    " promoted_slug, source_missing_at"
)


def _promotion(row: tuple[object, ...]) -> Promotion:
    keys = [key.strip() for key in _PROMOTION_COLUMNS.split(",")]
    data: dict[str, object] = dict(zip(keys, row, strict=True))
    data["source_slug"] = data.pop("source_session_slug")
    data["dura"] = json.loads(str(data.pop("dura_score")))
    for key in ("proposed_triggers", "proposed_supersedes", "evidence"):
        data[key] = json.loads(str(data[key]))
    data["reasoning"] = data["reasoning"] or ""
    return Promotion.model_validate(data)


def _unknown_promotion(promotion_id: int) -> NotFound:
    return NotFound(
        f"no promotion {promotion_id}",
        hint="`memoryd promotions --status pending` lists the queue with its ids",
    )


class PromotionQueue(StoreBase):
    """The promotions queue, for `GovernanceStore`."""

    # -- the promotions queue ----------------------------------------------------------------
    def propose_promotion(self, proposal: PromotionProposal, now: datetime) -> tuple[int, Proposed]:
        """Queue a proposal, at most one pending per source session.

        A pending promotion of the same session is refreshed in place (same id: the session
        grew, or was scored again). A decided promotion of exactly this content is left alone:
        a reviewer's answer is not asked again for the same text.
        """
        values = (
            proposal.source_title,
            proposal.source_fingerprint,
            proposal.scope_hash,
            proposal.proposed_type.value,
            proposal.proposed_title,
            proposal.proposed_body,
            json.dumps(proposal.proposed_triggers, ensure_ascii=False),
            json.dumps(proposal.proposed_supersedes, ensure_ascii=False),
            proposal.dura.model_dump_json(),
            proposal.reasoning,
            json.dumps(proposal.evidence, ensure_ascii=False),
        )
        with self._transaction("queue a promotion in") as conn:
            pending = conn.execute(
                "SELECT id FROM promotions WHERE source_session_slug = ? AND status = 'pending'"
                " ORDER BY id LIMIT 1",
                (proposal.source_slug,),
            ).fetchone()
            if pending is not None:
                conn.execute(
                    "UPDATE promotions SET source_title = ?, source_fingerprint = ?,"
                    " scope_hash = ?, proposed_type = ?, proposed_title = ?, proposed_body = ?,"
                    " proposed_triggers = ?, proposed_supersedes = ?, dura_score = ?,"
                    " reasoning = ?, evidence = ?, source_missing_at = NULL WHERE id = ?",
                    (*values, pending[0]),
                )
                return int(pending[0]), "updated"
            decided = conn.execute(
                "SELECT id FROM promotions WHERE source_session_slug = ?"
                " AND source_fingerprint = ? ORDER BY id DESC LIMIT 1",
                (proposal.source_slug, proposal.source_fingerprint),
            ).fetchone()
            if decided is not None:
                return int(decided[0]), "decided"
            cursor = conn.execute(
                "INSERT INTO promotions (source_title, source_fingerprint, scope_hash,"
                " proposed_type, proposed_title, proposed_body, proposed_triggers,"
                " proposed_supersedes, dura_score, reasoning, evidence, source_session_slug,"
                " status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
                (*values, proposal.source_slug, _instant(now)),
            )
            return int(cursor.lastrowid or 0), "new"

    def promotion(self, promotion_id: int) -> Promotion | None:
        """One promotion by id, or None."""
        with self._connection("read the promotions of") as conn:
            row = conn.execute(
                f"SELECT {_PROMOTION_COLUMNS} FROM promotions WHERE id = ?", (promotion_id,)
            ).fetchone()
        return None if row is None else _promotion(row)

    def promotions(
        self,
        *,
        status: PromotionStatus | None = None,
        scope_hash: str | None = None,
        source_slug: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Promotion]:
        """The queue, newest first; each filter is optional."""
        clauses: list[str] = []
        params: list[object] = []
        for column, value in (
            ("status", status),
            ("scope_hash", scope_hash),
            ("source_session_slug", source_slug),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        query = (
            f"SELECT {_PROMOTION_COLUMNS} FROM promotions {where}"
            " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
        )
        with self._connection("read the promotions of") as conn:
            rows = conn.execute(query, (*params, limit, offset)).fetchall()
        return [_promotion(row) for row in rows]

    def decide_promotion(
        self,
        promotion_id: int,
        status: PromotionStatus,
        *,
        by: str,
        now: datetime,
        reason: str | None = None,
        promoted_slug: str | None = None,
    ) -> Promotion:
        """Record a decision on a pending promotion. Unknown id: NotFound; already decided:
        Conflict (deciding twice is refused, whatever the second answer)."""
        if status == "pending":
            raise InvalidInput("a decision is approved, rejected or merged, not pending")
        with self._transaction("decide a promotion in") as conn:
            row = conn.execute(
                "SELECT status, decided_at FROM promotions WHERE id = ?", (promotion_id,)
            ).fetchone()
            if row is None:
                raise _unknown_promotion(promotion_id)
            if row[0] != "pending":
                raise Conflict(
                    f"promotion {promotion_id} was already decided: {row[0]} at {row[1]}",
                    hint="`memoryd promotions --status pending` lists what is left to decide",
                )
            conn.execute(
                "UPDATE promotions SET status = ?, decided_at = ?, decided_by = ?,"
                " decision_reason = ?, promoted_slug = ? WHERE id = ?",
                (status, _instant(now), by, reason, promoted_slug, promotion_id),
            )
        decided = self.promotion(promotion_id)
        assert decided is not None
        return decided

    def mark_source_missing(self, promotion_id: int, now: datetime) -> None:
        """Mark a pending promotion whose source session is gone; it stays in the queue."""
        with self._transaction("mark a promotion in") as conn:
            cursor = conn.execute(
                "UPDATE promotions SET source_missing_at = ? WHERE id = ?",
                (_instant(now), promotion_id),
            )
            if cursor.rowcount == 0:
                raise _unknown_promotion(promotion_id)

    def promotion_counts(self) -> dict[PromotionStatus, int]:
        """How many promotions are in each state (for `doctor` and the review page)."""
        counts: dict[PromotionStatus, int] = {
            "pending": 0,
            "approved": 0,
            "rejected": 0,
            "merged": 0,
        }
        with self._connection("read the promotions of") as conn:
            for state, count in conn.execute(
                "SELECT status, count(*) FROM promotions GROUP BY status"
            ):
                counts[state] = int(count)
        return counts

    # -- promotions: merge (governance/merge.py) ---------------------------------------------
    def merge_promotions(
        self, slugs: Sequence[str], now: datetime, *, into: str, by: str
    ) -> list[int]:
        """Mark the pending promotions of memories merged `into` another `merged` (decided by
        `by`, the reason naming the kept memory); returns their ids."""
        if not slugs:
            return []
        marks = ",".join("?" * len(slugs))
        with self._transaction("merge promotions in") as conn:
            rows = conn.execute(
                "UPDATE promotions SET status = 'merged', decided_at = ?, decided_by = ?,"
                " decision_reason = ?"
                f" WHERE status = 'pending' AND source_session_slug IN ({marks}) RETURNING id",
                (_instant(now), by, f"merged into {into}", *slugs),
            ).fetchall()
        return sorted(int(r[0]) for r in rows)
