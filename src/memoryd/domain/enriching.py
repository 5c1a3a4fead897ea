"""The enrichment queue of captured sessions: the spaCy rules now, the LLM stage when a
daemon runs it (`memoryd.enrichment` says how a job flows)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memoryd.domain.core import (
    ServiceCore,
)
from memoryd.enrichment import (
    EnrichmentJob,
    LLMResult,
    content_fingerprint,
    run_llm_stage,
)
from memoryd.errors import (
    MemorydError,
)
from memoryd.extraction.apply import apply_extraction, merge_extractions
from memoryd.governance.store import EnrichmentState
from memoryd.memfile import split_summary, with_summary
from memoryd.models import (
    Extraction,
    Memory,
    PromotionProposal,
    to_utc,
    utcnow,
)

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

_NEVER = datetime.min.replace(tzinfo=UTC)


class Enriching(ServiceCore):
    """Enrichment jobs: prepare (a read), run the LLM (no lock), apply (a write)."""

    # -- enrichment (captured sessions: extraction and the LLM summary, afterwards) -------
    def enrich_pending(self, limit: int | None = None, *, use_llm: bool = True) -> int:
        """Enrich queued captured sessions in this thread; returns how many were processed.

        Each runs the spaCy rules and, with `use_llm` and a provider configured, the LLM
        stage (refined extraction and a `## Summary` section), then is written like any edit.
        Embedded commands pass `use_llm=False`: they run the rules and leave the LLM work
        pending for the daemon, whose worker runs the same steps with the LLM call outside
        its writer thread (`prepare_enrichment`, `run_llm_stage`, `apply_enrichment`).
        """
        self._require_writable("enrich captured sessions")
        done = 0
        for slug in self.enrichment_due(limit or 1_000_000, use_llm=use_llm):
            try:
                job = self.prepare_enrichment(slug, use_llm=use_llm)
                if job is None:
                    continue
                result = None
                if job.use_llm and self.llm is not None:
                    result = run_llm_stage(self.llm, job)
                state = self.apply_enrichment(job, result)
                if (
                    self.llm_judge_inline
                    and job.use_llm
                    and job.skip is None
                    and state not in ("requeued", "gone")
                ):
                    try:  # the LLM's part: the rules ran as it was written
                        self.judge_supersedes(slug)
                    except MemorydError as exc:
                        logger.warning("supersede judging of %s failed: %s", slug, exc)
            except MemorydError as exc:  # one memory must not hold up the others
                logger.warning("enrichment of %s stays queued: %s", slug, exc)
                continue
            done += 1
        return done

    def enrichment_due(self, limit: int, *, use_llm: bool = True) -> list[str]:
        """Slugs of queued sessions due now: the `limit` longest waiting, in the order the
        sessions happened (their `created_at`, then slug). Without the LLM stage
        (`use_llm=False` while a provider is configured) only those the rules have not seen:
        the rest wait for the daemon.

        Why not in queue order: each session is extracted against the entities the ones
        enriched before it added, and the queue's stamps are to the second, so a drain that
        crossed a second boundary at another place reordered the batch by slug, and the same
        captures gave other mentions run to run. The sessions' own times are the data's.
        """
        rules_only = self.llm is not None and not use_llm
        rows = self.governance.due_enrichments(utcnow(), limit, rules_only=rules_only)
        slugs = [row.slug for row in rows]
        found = self.graph.memory_rows(slugs)

        def happened(slug: str) -> tuple[bool, datetime, str]:
            row = found.get(slug)  # a memory gone from the graph settles as skipped, last
            return (row is None, to_utc(row.created_at) if row else _NEVER, slug)

        return sorted(slugs, key=happened)

    def enrichment_counts(self) -> dict[EnrichmentState, int]:
        """Queued sessions by state: pending, done, failed (for `doctor`)."""
        return self.governance.enrichment_counts()

    def prepare_enrichment(self, slug: str, *, use_llm: bool = True) -> EnrichmentJob | None:
        """Read a queued memory and run the spaCy rules on it; None when it is not pending.

        Writes nothing (the daemon runs it as a read). The job is about the content the file
        holds now, which `apply_enrichment` checks again before writing.
        """
        from memoryd.governance.analyze import score_heuristic, sensitive

        row = self.governance.enrichment(slug)
        if row is None or row.state != "pending":
            return None
        graph_row = self.graph.get_memory(slug)
        path = self._file_of(slug, graph_row)
        if path is None or not path.is_file():
            path = self.vault.find(slug)
        if path is None:
            return EnrichmentJob(
                slug, row.fingerprint, skip="its file is gone", skip_state="failed"
            )
        try:
            memory = self.vault.read(path)
        except MemorydError as exc:
            return EnrichmentJob(slug, row.fingerprint, skip=exc.message, skip_state="failed")
        scope = self.vault.read_scope(memory.meta.scope_hash)
        if sensitive(memory, scope):
            # No extraction either: nothing of a sensitive memory leaves its file in plain text.
            return EnrichmentJob(slug, row.fingerprint, skip="its scope is sensitive")
        text = split_summary(memory.body)[1]
        known = self._known_entities() if self.extractor is not None else []
        rules = (
            self.extractor.extract(text, title=memory.meta.title, known=known)
            if self.extractor is not None
            else Extraction()
        )
        session, candidates = self._dura_input(memory, scope, rules)
        return EnrichmentJob(
            slug,
            content_fingerprint(memory),
            title=memory.meta.title,
            text=text,
            known=tuple(k.name for k in known),
            rules=rules,
            use_llm=use_llm and self.llm is not None,
            session=session,
            heuristic=score_heuristic(session, candidates) if session is not None else None,
            candidates=candidates,
        )

    def apply_enrichment(self, job: EnrichmentJob, result: LLMResult | None = None) -> str:
        """Write what a job found and settle its queue row; returns what happened.

        Under the memory's file lock (the hook takes it too) the file is read again: if its
        content is no longer the job's, nothing is written and the memory is queued again
        for the new content. Otherwise the proposals go into the frontmatter and the summary
        to the top of the body, then the graph, the search index and an `enrich` audit line
        follow, all undone if one fails. The rules' part is written even when the LLM failed;
        the row then stays pending (with a growing wait) until `max_attempts`, then `failed`.
        """
        self._require_writable("enrich a memory")
        now = utcnow()
        if job.skip is not None:
            logger.info("enrichment of %s skipped: %s", job.slug, job.skip)
            self._settle(job, job.skip_state, rules_done=True, attempts=0, error=job.skip)
            return job.skip_state
        with self._file_lock(job.slug):
            row = self.governance.enrichment(job.slug)
            path = self.vault.find(job.slug)
            if row is None or path is None:
                return "gone"
            old = self.vault.read(path)
            current = content_fingerprint(old)
            if current != job.fingerprint:
                self.governance.enqueue_enrichment(job.slug, current, now)
                logger.info("%s changed while it was enriched: queued again", job.slug)
                return "requeued"
            if row.fingerprint != job.fingerprint:
                # The file changed before it was drained: the job is about what it holds now.
                self.governance.enqueue_enrichment(job.slug, job.fingerprint, now)
                row = self.governance.enrichment(job.slug) or row
            self._write_enrichment(old, job, result, self._dura_of(job, result, row.attempts))
        try:  # the rules now; the daemon's worker asks the LLM afterwards, off the writer
            self.judge_supersedes(job.slug, use_llm=False)
        except MemorydError as exc:
            logger.warning("supersede judging of %s failed: %s", job.slug, exc)
        if result is not None and not self.llm_judge_inline:
            # The LLM read this session: its judge's turn, through the durable queue.
            self.governance.queue_judges([job.slug], now)
        if result is None:
            # The LLM stage did not run: done, unless a provider is configured (the daemon
            # runs it later; embedded commands only run the rules).
            state: EnrichmentState = "pending" if self.llm is not None else "done"
            self._settle(job, state, rules_done=True, attempts=row.attempts, error=None)
            return state
        if result.error is None:
            self._settle(job, "done", rules_done=True, attempts=row.attempts, error=None)
            return "done"
        attempts = row.attempts + 1
        failed = attempts >= self.enrichment.max_attempts
        error = f"{result.error.code}: {result.error.message}"
        logger.warning(
            "LLM enrichment of %s failed (attempt %d of %d): %s",
            job.slug,
            attempts,
            self.enrichment.max_attempts,
            error,
        )
        self._settle(
            job,
            "failed" if failed else "pending",
            rules_done=True,
            attempts=attempts,
            error=error,
            wait=self.enrichment.backoff(attempts),
        )
        return "failed" if failed else "retry"

    def _write_enrichment(
        self,
        old: Memory,
        job: EnrichmentJob,
        result: LLMResult | None,
        dura: PromotionProposal | None = None,
    ) -> None:
        """Proposals into the frontmatter, the summary atop the body, the DURA score; vault,
        graph, index, audit, then the promotion when the score reaches the threshold. Called
        under the file lock; a memory it would not change is left alone."""
        found = job.rules
        if result is not None and result.refined is not None:
            found = merge_extractions(found, result.refined)
        new = Memory(
            meta=old.meta.model_copy(deep=True),
            body=old.body,
            path=old.path,
            sensitive=old.sensitive,
        )
        apply_extraction(new, found, self._merged_into())
        if result is not None and result.summary_section:
            new.body = with_summary(result.summary_section, old.body)
        if dura is not None:
            new.meta.dura_score = dura.dura
        if (
            new.body == old.body
            and new.meta.observations == old.meta.observations
            and new.meta.relations == old.meta.relations
            and new.meta.dura_score == old.meta.dura_score
        ):
            if dura is not None:
                self._propose(dura)
            return
        new.meta.updated_at = utcnow()
        details: dict[str, Any] = {
            "stages": found.stages,
            "observations": len(new.meta.observations),
            "relations": len(new.meta.relations),
            "summary": new.body != old.body,
        }
        if job.use_llm and self.llm is not None:
            details["llm"] = f"{self.llm.name}/{self.llm.model}"
        if dura is not None:
            details["dura"] = {"mean": round(dura.dura.mean, 3), "by": dura.dura.by}
        self._replace_everywhere(old, new, event_type="enrich", details=details)
        self.forget_entities()  # new entities: the next recall links queries to them
        if dura is not None:
            self._propose(dura)

    def _settle(
        self,
        job: EnrichmentJob,
        state: EnrichmentState,
        *,
        rules_done: bool,
        attempts: int,
        error: str | None,
        wait: float = 0.0,
    ) -> None:
        now = utcnow()
        recorded = self.governance.record_enrichment(
            job.slug,
            job.fingerprint,
            state=state,
            rules_done=rules_done,
            attempts=attempts,
            last_error=error,
            next_attempt_at=now + timedelta(seconds=wait),
            now=now,
        )
        if not recorded:
            logger.info("%s was queued again meanwhile: its new content is enriched next", job.slug)

    def _dura_of(
        self, job: EnrichmentJob, result: LLMResult | None, attempts: int
    ) -> PromotionProposal | None:
        """The DURA proposal to write: the LLM's; heuristic-v1's when no LLM is configured
        or when this was the LLM's last allowed attempt; None while the LLM is still owed."""
        if result is not None and result.dura is not None:
            return result.dura
        if self.llm is None:
            return job.heuristic
        last = result is not None and attempts + 1 >= self.enrichment.max_attempts
        return job.heuristic if last else None
