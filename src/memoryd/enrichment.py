"""Enrichment of captured sessions: the values the background worker passes between its steps.

A capture is indexed as soon as the inbox is drained, but extraction and the LLM summary are
slower (spaCy, then a paid HTTP call), so they are queued (`enrichment` in governance.db) and
done afterwards in three steps:

1. `MemoryService.prepare_enrichment` reads the memory and runs the spaCy rules (a read);
2. `run_llm_stage` asks the LLM to refine the extraction and to summarise the session; it
   touches no store, so the daemon runs it off its writer thread;
3. `MemoryService.apply_enrichment` writes the result on the writer, after checking under the
   memory's file lock that the content is still the one the job was prepared from.

The queue row is keyed by `content_fingerprint`: the title and the body without the summary
section, the part capture owns. What enrichment writes (frontmatter, the summary) does not
change it, so a memory is never enriched twice for the same content.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memoryd.errors import MemorydError
from memoryd.governance.store import EnrichmentState
from memoryd.llm.base import LLMProvider, Usage
from memoryd.memfile import split_summary
from memoryd.models import Extraction, Memory, PromotionProposal

if TYPE_CHECKING:
    from memoryd.governance.analyze import Candidate, SessionText

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 6 * 3600.0


def content_fingerprint(memory: Memory) -> str:
    """sha1 of the title and the body without its summary section: what a job is about."""
    text = f"{memory.meta.title}\n{split_summary(memory.body)[1]}"
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class EnrichmentPolicy:
    """How the queue treats LLM failures: `max_attempts` of them, waiting `backoff_s`, doubled
    after each (at most `MAX_BACKOFF_S`), then the memory is marked failed."""

    max_attempts: int = 5
    backoff_s: float = 60.0

    def backoff(self, attempts: int) -> float:
        """The wait after the `attempts`-th failed attempt (1 for the first)."""
        return min(MAX_BACKOFF_S, self.backoff_s * 2.0 ** max(0, attempts - 1))


@dataclass(frozen=True)
class EnrichmentJob:
    """One memory's enrichment as prepared from its file.

    `skip` says why there is nothing to run (the state to record is `skip_state`); otherwise
    `text` is the body the stages read (without the summary section), `rules` the spaCy
    stage's proposals and `use_llm` whether the LLM stage runs now. `session` is what DURA
    scoring reads (None when the memory may not be scored), `heuristic` heuristic-v1's
    proposal for it (written when no LLM scores) and `candidates` the long-term memories it
    might supersede.
    """

    slug: str
    fingerprint: str
    title: str = ""
    text: str = ""
    known: tuple[str, ...] = ()
    rules: Extraction = field(default_factory=Extraction)
    use_llm: bool = False
    skip: str | None = None
    skip_state: EnrichmentState = "done"
    session: SessionText | None = None
    heuristic: PromotionProposal | None = None
    candidates: tuple[Candidate, ...] = ()


@dataclass(frozen=True)
class LLMResult:
    """What the LLM stage returned: refined proposals, a summary, or the error that stopped it
    (returned, not raised: the spaCy part is written all the same)."""

    refined: Extraction | None = None
    summary_section: str = ""
    dura: PromotionProposal | None = None
    error: MemorydError | None = None
    usage: Usage = field(default_factory=Usage)


def run_llm_stage(llm: LLMProvider, job: EnrichmentJob) -> LLMResult:
    """Refine the extraction, summarise the session, then score it on DURA: three
    structured LLM calls (the last only when the memory may be scored).

    Touches no store and holds no lock (the daemon runs it beside its writer). Token use and
    estimated cost are logged per memory; no text of the memory is.
    """
    from memoryd.governance.analyze import score_with_llm
    from memoryd.llm.extract import extract_with_llm, summarize_session
    from memoryd.memfile import render_summary

    before = llm.usage()
    refined: Extraction | None = None
    section = ""
    dura: PromotionProposal | None = None
    error: MemorydError | None = None
    try:
        refined = extract_with_llm(
            llm, f"{job.title}\n\n{job.text}", known_entities=job.known, spacy_hint=job.rules
        )
        summary = summarize_session(llm, job.title, job.text)
        section = render_summary(summary.summary, summary.decisions, summary.open_problems)
        if job.session is not None:
            dura = score_with_llm(llm, job.session, job.candidates)
    except MemorydError as exc:
        error = exc
    spent = _spent(before, llm.usage())
    logger.info(
        "enrichment of %s: %s %s, %d request(s), %d input + %d output tokens, %s%s",
        job.slug,
        llm.name,
        llm.model,
        spent.requests,
        spent.input_tokens,
        spent.output_tokens,
        "cost unknown" if spent.cost_usd is None else f"about ${spent.cost_usd:.4f}",
        f"; failed: {error.code}" if error is not None else "",
    )
    return LLMResult(refined=refined, summary_section=section, dura=dura, error=error, usage=spent)


def _spent(before: Usage, after: Usage) -> Usage:
    """What one job cost: the provider's running total after, minus before (other threads
    may share the provider, so this is an estimate under concurrency)."""
    cost = (
        None
        if before.cost_usd is None or after.cost_usd is None
        else max(0.0, after.cost_usd - before.cost_usd)
    )
    return Usage(
        requests=after.requests - before.requests,
        input_tokens=after.input_tokens - before.input_tokens,
        output_tokens=after.output_tokens - before.output_tokens,
        cost_usd=cost,
    )
