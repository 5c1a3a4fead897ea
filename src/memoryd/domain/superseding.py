"""Supersede judging through the service: whether a new memory replaces older ones, and the
human's decisions on candidates (the rules and the LLM judge live in
`memoryd.governance.supersede`; these are the thin methods)."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

from memoryd.domain.core import ServiceCore
from memoryd.errors import InvalidInput, NotFound, PolicyDenied
from memoryd.governance import supersede
from memoryd.governance.analyze import sensitive
from memoryd.governance.store import EnrichmentState, JudgeRow
from memoryd.graph.store import SupersedeRow
from memoryd.models import SupersedeDecision

logger = logging.getLogger(__name__)


class Superseding(ServiceCore):
    """Judge supersedes and decide candidates."""

    # -- supersede judging (memoryd.governance.supersede) ---------------------------------
    @property
    def supersede_tiers(self) -> supersede.Tiers:
        cfg = self.supersede_settings
        return supersede.Tiers(auto=cfg.auto_threshold, candidate=cfg.candidate_threshold)

    def prepare_supersede(self, slug: str) -> supersede.SupersedeJob | None:
        """A read: the older memories this one may replace, with the rules' verdicts; None
        when there is nothing to judge (a sensitive memory's text never leaves its file)."""
        memory = self._load(slug)
        scope = self.vault.read_scope(memory.meta.scope_hash)
        if sensitive(memory, scope):
            return None
        pairs = supersede.find_pairs(self.graph, memory, limit=self.supersede_settings.max_pairs)
        if not pairs:
            return None
        text = supersede.pair_texts(memory.meta.title, memory.body)
        job = supersede.SupersedeJob(slug, text, pairs, session=memory.meta.type.value == "session")
        supersede.judge_pairs(job)
        return job

    def judge_supersedes_llm(self, job: supersede.SupersedeJob) -> None:
        """The LLM judge on the pairs the rules left (no store is touched: the daemon runs it
        off its writer thread)."""
        if self.llm is None or not self.supersede_settings.use_llm:
            return
        limit = self.supersede_settings.max_llm_pairs
        supersede.judge_with_llm(
            job, self.llm, supersede.needs_llm(job, self.supersede_tiers, limit)
        )
        for error in job.llm_errors:  # the rules' verdicts stand; asked again next time
            logger.warning("LLM supersede judge for %s failed on %s", job.newer, error)

    def apply_supersede(self, job: supersede.SupersedeJob) -> list[SupersedeDecision]:
        """Write the job's automatic and candidate decisions into the newer memory's file (so
        `reindex` rebuilds its SUPERSEDES edges), then graph, index and a `supersede` audit
        line. Pairs decided meanwhile are left as they are."""
        self._require_writable("record supersede decisions")
        with self._file_lock(job.newer):
            old = self._load(job.newer)
            decided = set(old.meta.supersedes) | {d.older for d in old.meta.supersede_decisions}
            decisions = [
                d
                for d in supersede.new_decisions(job, self.supersede_tiers, self.clock())
                if d.older not in decided
            ]
            if not decisions:
                return []
            new = self._edited(old, supersede.with_decisions(old, decisions), old.path)
            details = {
                "decisions": [
                    {
                        "older": d.older,
                        "status": d.status.value,
                        "confidence": d.confidence,
                        "judge": d.judge,
                    }
                    for d in decisions
                ]
            }
            self._replace_everywhere(old, new, event_type="supersede", details=details)
        return decisions

    def judge_supersedes(self, slug: str, *, use_llm: bool = True) -> list[SupersedeDecision]:
        """Judge whether this memory replaces older ones, and record what was decided."""
        self._require_writable("judge supersedes")
        job = self.prepare_supersede(slug)
        if job is None:
            return []
        if use_llm:
            self.judge_supersedes_llm(job)
        return self.apply_supersede(job)

    # -- the judge queue (the daemon's worker: the LLM's part, durable, with backoff) ------
    def judges_due(self, limit: int) -> list[JudgeRow]:
        """The memories whose LLM judging is owed and due now (a read); none while no LLM
        judge is configured (they wait for one)."""
        if self.llm is None or not self.supersede_settings.use_llm:
            return []
        return self.governance.due_judges(self.clock(), limit)

    def settle_judge(self, row: JudgeRow, errors: list[str]) -> str:
        """Record how a queued judge job ended (a write): `done`, or, after `errors` (the LLM
        failed on a pair, or the memory could not be read), `retry` after the enrichment
        queue's backoff and `failed` after its last attempt. A memory queued again meanwhile
        keeps its new queueing."""
        self._require_writable("settle supersede judging")
        now = self.clock()
        state: EnrichmentState = "done"
        attempts, wait, error = row.attempts, 0.0, None
        if errors:
            attempts += 1
            state = "failed" if attempts >= self.enrichment.max_attempts else "pending"
            wait = self.enrichment.backoff(attempts)
            error = "; ".join(errors)[:2000]
            logger.warning(
                "LLM supersede judge of %s failed (attempt %d of %d)%s",
                row.slug,
                attempts,
                self.enrichment.max_attempts,
                "" if state == "failed" else f"; retried in {wait:.0f} s",
            )
        self.governance.settle_judge(
            row,
            state=state,
            attempts=attempts,
            last_error=error,
            next_attempt_at=now + timedelta(seconds=wait),
            now=now,
        )
        return "retry" if state == "pending" else state

    def judge_counts(self) -> dict[EnrichmentState, int]:
        """Queued judge jobs by state: pending, done, failed (for `doctor`)."""
        return self.governance.judge_counts()

    def decide_supersede(
        self,
        newer: str,
        older: str,
        action: supersede.SupersedeAction,
        *,
        by: str = "user",
        agent: bool = False,
    ) -> SupersedeDecision:
        """`undo` an active supersede, or `accept`/`reject` a candidate; audited. An `agent`
        (MCP) decides only when `governance.agents_decide` lets agents decide, as for
        promotions: which memory is current is the user's call."""
        self._require_writable(f"{action} a supersede")
        if agent and not self.review.policy.agents_decide:
            raise PolicyDenied(
                f"agents may not decide supersedes here ({newer} → {older} stays as it is)",
                hint="set `agents_decide = true` under [governance] in config.toml to let"
                f" agents decide, or decide yourself: `memoryd supersede {action} {newer} {older}`",
            )
        if by not in ("user", "digest"):
            raise InvalidInput(f"decided_by {by!r} must be user or digest")
        if self.graph.get_memory(older) is None and self.vault.find(older) is None:
            raise NotFound(f"no memory with slug {older!r}", hint="`memoryd list` shows the slugs")
        with self._file_lock(newer):
            old = self._load(newer)
            decision = supersede.decide(old, older, action, by=by, now=self.clock())
            new = self._edited(old, supersede.with_decisions(old, [decision]), old.path)
            self._replace_everywhere(
                old,
                new,
                event_type=f"supersede_{action}",
                details={"older": older, "status": decision.status.value, "decided_by": by},
            )
        return decision

    def supersede_candidates(self, scope: Path | str | None = None) -> list[SupersedeRow]:
        """Supersede candidates waiting for a human, most confident first."""
        return supersede.candidates(self.graph, self.scope_hash_of(scope))
