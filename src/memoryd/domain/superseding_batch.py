"""A write batch's supersede judging before its write (`record_many`): the batch's memories
judged against the graph and against each other, so that their decisions go out with the
batch's one write (`Superseding` judges a batch once written when it cannot)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memoryd.domain.core import SUPERSEDE_BULK_LIMIT, ServiceCore
from memoryd.errors import MemorydError
from memoryd.models import Memory
from memoryd.redact.fields import clean_stored

if TYPE_CHECKING:
    from memoryd.governance import supersede

logger = logging.getLogger(__name__)


class BatchJudging(ServiceCore):
    """A batch's jobs, and judging a batch before its write."""

    prepare_supersede: Callable[..., supersede.SupersedeJob | None]
    judge_supersedes_llm: Callable[[supersede.SupersedeJob], None]
    _judging_skipped: Callable[[str], None]
    _status_lines_may_link: Callable[[str, set[str], Sequence[Memory]], bool]
    _decisions_of: Callable[
        [Memory, supersede.SupersedeJob], tuple[Memory, dict[str, Any], list[Any]] | None
    ]
    supersede_tiers: Any
    """Provided by `domain.superseding.Superseding`."""

    def _batch_jobs(
        self,
        linked: Sequence[Memory],
        found: dict[str, list[supersede.Pair]],
        *,
        inline: bool,
        queue: bool,
        failed: list[str] | None = None,
    ) -> list[supersede.SupersedeJob]:
        """A batch's jobs on the `found` pairs, in `created_at` order: a memory the batch
        judged before replaces none of it again (`inline`: the LLM judges too; `queue`: the
        LLM judges later). A memory whose judging fails is logged and skipped, or its slug
        added to `failed` when given."""
        from memoryd.governance import supersede

        taken: dict[str, set[str]] = {}  # older -> the newers this loop decided about it
        jobs: list[supersede.SupersedeJob] = []
        for memory in linked:  # the rest share no entity with anything: no pair
            # Memories written in the same second are older to each other: the one judged
            # first may have replaced this one meanwhile.
            gone = taken.get(memory.slug, set())
            pairs = [p for p in found.get(memory.slug, []) if p.older not in gone]
            try:
                job = self.prepare_supersede(memory.slug, pairs, written=memory)
                if job is not None and inline:
                    self.judge_supersedes_llm(job)
            except MemorydError as exc:
                if failed is not None:
                    failed.append(memory.slug)
                    return jobs
                self._judging_skipped(f"supersede judging of {memory.slug} failed: {exc}")
                continue
            if job is not None:
                jobs.append(job)
                for d in supersede.new_decisions(job, self.supersede_tiers, self.clock()):
                    taken.setdefault(d.older, set()).add(memory.slug)
            if queue and self.llm is not None:
                self.governance.queue_judges([memory.slug], self.clock())
        return jobs

    def judge_batch_unwritten(
        self, memories: Sequence[Memory], *, use_llm: bool
    ) -> tuple[list[Memory], list[tuple[str, str, dict[str, Any]]]] | None:
        """Judge a batch before its write (`record_many`, ≤ `SUPERSEDE_BULK_LIMIT` judged),
        so that its decisions are written with it in the batch's one write, not by a second
        write of every file, graph row and index document they change: the batch with its
        decisions (same order) and its `supersede` audit events. None when it must be judged
        once written (`judge_written`): a status line of its scope may link one of it, an
        LLM judges, or a read failed. The same verdicts as `judge_written`
        (`find_pairs_batch`), from the pairs some rule may decide."""
        from memoryd.governance import supersede

        judged = sorted(
            (m for m in memories if m.meta.type.long_term and not m.sensitive),
            key=lambda m: (m.meta.created_at, m.slug),
        )
        if len(judged) > SUPERSEDE_BULK_LIMIT or (use_llm and self.llm is not None):
            return None
        slugs = {m.slug for m in judged}
        linked = [m for m in judged if m.meta.observations or m.meta.relations]
        failed: list[str] = []
        changed: dict[str, Memory] = {}
        events: list[tuple[str, str, dict[str, Any]]] = []
        try:
            for scope_hash in dict.fromkeys(m.meta.scope_hash for m in judged):
                if self._status_lines_may_link(scope_hash, slugs, judged):
                    return None
            found = supersede.find_pairs_batch(
                self.graph,
                linked,
                memories,
                limit=self.supersede_settings.max_pairs,
                kept=self.judged_mentions,
                rules_only=True,  # no LLM judges here: a pair no rule decides is not built
            )
            jobs = self._batch_jobs(linked, found, inline=False, queue=False, failed=failed)
            by_slug = {m.slug: m for m in memories}
            for job in [] if failed else jobs:
                edit = self._decisions_of(by_slug[job.newer], job)
                if edit is None:
                    continue
                new, details, _ = edit
                clean_stored(new)  # as `_replace_everywhere` cleans a rewrite: reasons quote text
                changed[job.newer] = new
                events.append((job.newer, "supersede", details))
        except MemorydError as exc:
            logger.warning(
                "supersede judging of %d memories before their write failed: %s", len(judged), exc
            )
            return None
        if failed:
            return None  # judged once written, where a memory that fails is skipped alone
        return [changed.get(m.slug, m) for m in memories], events
