"""Governance through the service: DURA scores of session memories and the promotions
queue (the rules live in `memoryd.governance`; these are the thin methods)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd.domain.core import (
    ServiceCore,
)
from memoryd.enrichment import (
    content_fingerprint,
)
from memoryd.errors import (
    Conflict,
    InvalidInput,
    MemorydError,
    PolicyDenied,
)
from memoryd.memfile import split_summary
from memoryd.models import (
    DuraAnalysis,
    Extraction,
    MemoryType,
    Promotion,
    PromotionProposal,
    PromotionStatus,
)

if TYPE_CHECKING:
    from memoryd.governance.analyze import AnalysisJob, AnalysisMode

logger = logging.getLogger(__name__)


class Governing(ServiceCore):
    """Score sessions again and decide promotions."""

    # -- DURA scoring and the promotions queue (governance.analyze, .promotions) ----------
    def analyze_session(self, slug: str, *, mode: AnalysisMode = "auto") -> DuraAnalysis:
        """Score one session memory again (`memoryd analyze-session`): prepare, score (the
        LLM with `llm`, heuristic-v1 with `heuristic`, `auto`: the LLM when one is
        configured), write. The daemon runs the three steps apart (the LLM off its writer)."""
        from memoryd.governance.analyze import run_analysis

        job = self.prepare_analysis(slug, mode=mode)
        return self.apply_analysis(job, run_analysis(self.llm, job))

    def prepare_analysis(self, slug: str, *, mode: AnalysisMode = "auto") -> AnalysisJob:
        """Read the memory and everything scoring needs (a read)."""
        from memoryd.governance.analyze import AnalysisJob, refusal, score_heuristic

        if mode == "llm" and self.llm is None:
            # The request is what cannot be met here (a 422, exit 2), not a broken config.
            raise InvalidInput(
                "--llm: no LLM is configured",
                hint="set provider under [llm] in config.toml, or score with --heuristic",
            )
        memory = self._load(slug)
        if memory.meta.type is not MemoryType.SESSION:
            raise InvalidInput(
                f"{slug} is a {memory.meta.type.value}: only session memories are scored",
                hint="`memoryd list --type session` lists them",
            )
        scope = self.vault.read_scope(memory.meta.scope_hash)
        rules = (
            self.extractor.extract(
                split_summary(memory.body)[1],
                title=memory.meta.title,
                known=self._known_entities(),
            )
            if self.extractor is not None
            else Extraction()
        )
        session, candidates = self._dura_input(memory, scope, rules)
        if session is None:
            raise PolicyDenied(f"{slug} is not scored: {refusal(memory, scope)}")
        return AnalysisJob(
            slug=slug,
            fingerprint=session.fingerprint,
            session=session,
            candidates=candidates,
            use_llm=mode == "llm" or (mode == "auto" and self.llm is not None),
            heuristic=score_heuristic(session, candidates),
        )

    def apply_analysis(
        self, job: AnalysisJob, outcome: PromotionProposal | MemorydError
    ) -> DuraAnalysis:
        """Write the score into the memory's frontmatter (an `analyze` audit event) and queue
        the promotion when its mean reaches the threshold. A failed LLM call leaves the
        memory queued with backoff, like enrichment, and is raised with when it is retried."""
        from memoryd.governance.analyze import retry_later

        self._require_writable("score a session")
        if isinstance(outcome, MemorydError):
            raise retry_later(
                self.governance,
                job,
                outcome,
                max_attempts=self.enrichment.max_attempts,
                backoff=self.enrichment.backoff,
            )
        with self._file_lock(job.slug):
            old = self._load(job.slug)
            if content_fingerprint(old) != job.fingerprint:
                raise Conflict(
                    f"{job.slug} changed while it was scored; nothing was written",
                    hint="run `memoryd analyze-session` again",
                )
            if old.meta.dura_score != outcome.dura:
                new = self._edited(old, {"dura_score": outcome.dura}, old.path)
                details = {"mean": round(outcome.dura.mean, 3), "by": outcome.dura.by}
                self._replace_everywhere(old, new, event_type="analyze", details=details)
        queued = self._propose(outcome)
        return DuraAnalysis(
            slug=job.slug,
            dura=outcome.dura,
            threshold=self.review.policy.dura_threshold,
            proposal=outcome,
            promotion_id=queued[0] if queued else None,
            queue=queued[1] if queued else None,
        )

    def list_promotions(
        self,
        *,
        status: PromotionStatus | None = "pending",
        scope: Path | str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Promotion]:
        """The promotions queue, newest first, with its evidence (None status: all)."""
        return self.review.list(
            status=status, scope_hash=self.scope_hash_of(scope), limit=limit, offset=offset
        )

    def get_promotion(self, promotion_id: int) -> Promotion:
        return self.review.get(promotion_id)

    def promote(
        self,
        promotion_id: int,
        *,
        type: MemoryType | None = None,
        title: str | None = None,
        body: str | None = None,
        agent: bool = False,
    ) -> Promotion:
        """Approve: write the long-term memory (see `governance.promotions.Review.promote`)."""
        self._require_writable("promote a session memory")
        return self.review.promote(
            promotion_id, actor=self.actor, agent=agent, type=type, title=title, body=body
        )

    def reject(
        self, promotion_id: int, *, reason: str | None = None, agent: bool = False
    ) -> Promotion:
        """Reject a pending promotion; the reason is kept in the queue."""
        self._require_writable("reject a promotion")
        return self.review.reject(promotion_id, actor=self.actor, agent=agent, reason=reason)
