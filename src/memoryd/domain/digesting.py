"""The weekly digest through the service: the review queues and what fades, on one page
(`memoryd.governance.digest` builds its sections, `governance.notify` sends it), and the
scheduled `digest --notify` the daemon runs."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.config import DigestSettings
from memoryd.domain.core import ServiceCore
from memoryd.errors import InvalidInput, MemorydError

if TYPE_CHECKING:  # imported where used: an open that never digests does not load them
    from memoryd.governance.digest import Digest
    from memoryd.governance.notify import NotifyReport

logger = logging.getLogger(__name__)

_PROMOTIONS_READ = 10_000


class Digesting(ServiceCore):
    """Build the digest; run and record the weekly notification."""

    digest_settings: DigestSettings = DigestSettings()
    """`[digest]` from the config (`wiring` sets it)."""

    def digest(
        self,
        *,
        scope: Path | str | None = None,
        days: int | None = None,
        limit: int | None = None,
    ) -> Digest:
        """What waits for a decision (promotions, supersede candidates, duplicates), the
        session memories whose next decay step falls due within `days`, and the window's
        trends; each list capped at `limit` (None: the `[digest]` config)."""
        from memoryd.governance import supersede
        from memoryd.governance import trends as trend_stats
        from memoryd.governance.digest import (
            MAX_LIMIT,
            Digest,
            duplicate_pairs,
            fading,
            trends_section,
        )

        days = self.digest_settings.days if days is None else days
        limit = self.digest_settings.limit if limit is None else limit
        if not 1 <= days <= 365:
            raise InvalidInput(f"days {days} must be between 1 and 365")
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidInput(f"limit {limit} must be between 1 and {MAX_LIMIT}")
        started = time.perf_counter()
        now = self.clock()
        scope_hash = self.scope_hash_of(scope)
        stores = self.governance_stores()
        promotions = self.review.list(
            status="pending", scope_hash=scope_hash, limit=_PROMOTIONS_READ
        )
        candidates = supersede.candidates(self.graph, scope_hash)
        pairs, pair_total, compared = duplicate_pairs(
            stores, now, days=days, limit=limit, scope_hash=scope_hash
        )
        fades, fade_total = fading(
            stores, now, self.decay_policy, days=days, limit=limit, scope_hash=scope_hash
        )
        trends = trend_stats.trends(
            self.graph, self.governance, now, days=days, scope_hash=scope_hash
        )
        return Digest(
            at=now,
            scope_hash=scope_hash,
            days=days,
            limit=limit,
            promotions=promotions[:limit],
            supersede_candidates=candidates[:limit],
            duplicates=pairs,
            fading=fades,
            totals={
                "promotions": len(promotions),
                "supersede": len(candidates),
                "duplicates": pair_total,
                "fading": fade_total,
            },
            notes=[
                f"near-duplicates are among the {compared} memories written in the last"
                f" {days} days (equal fingerprints: all); `memoryd duplicates` compares them all"
            ]
            if compared
            else [],
            trends=trends_section(trends),
            seconds=round(time.perf_counter() - started, 3),
        )

    def send_digest(self) -> tuple[Digest, NotifyReport]:
        """`digest --notify` here: build it and send it on every configured channel."""
        from memoryd.governance.notify import notify

        built = self.digest()
        return built, notify(built, self.digest_settings)

    def send_scheduled_digest(self) -> None:
        """The weekly `digest --notify` as the scheduler runs it (`Lifecycle.run_job`; the
        daemon beside its writer). The run and its outcome are recorded in governance.db
        (`memoryd schedule` shows it; a failed one is retried `schedule.RETRY_FAILED_AFTER`
        later); a failure is logged, never raised: the daemon goes on."""
        from memoryd.governance import schedule

        job = schedule.job("digest")
        now = self.clock()
        began = time.monotonic()
        try:
            _, report = self.send_digest()
        except (MemorydError, OSError, ValueError) as exc:  # never stops the daemon
            logger.exception("scheduled digest failed")
            outcome = f"error: {exc}"
        else:
            failures = "; ".join(f"{o.channel}: {o.note}" for o in report.failed)
            outcome = f"error: {failures}" if failures else f"ok: {report.summary()}"
        finished = now + timedelta(seconds=time.monotonic() - began)
        self.governance.record_run(job.name, now, finished, outcome)
