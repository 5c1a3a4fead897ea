"""The daemon's supersede-judge worker: the LLM's part of supersede judging, from the
durable queue in governance.db (`judge_queue`), off the writer thread. The enrichment
worker (`server.enrich_round`) runs a round of it before and after each enriched session."""

from __future__ import annotations

import asyncio
import logging

from memoryd.api.runner import ServiceRunner
from memoryd.errors import MemorydError, NotFound
from memoryd.service import MemoryService

logger = logging.getLogger(__name__)


async def judge_round(service: MemoryService, runner: ServiceRunner, limit: int) -> int:
    """The LLM's part of supersede judging for up to `limit` queued memories (governance.db's
    `judge_queue`: recorded long-term memories and enriched sessions, whose rules ran when
    they were written): pairs as a read, the LLM on a plain thread, the decisions and the
    queue row as writes. An LLM failure leaves the memory queued with backoff; a queue
    survives a restart. Returns how many were settled."""
    settled = 0
    for row in await runner.read(runner.background(service.judges_due), limit):
        errors: list[str] = []
        try:
            await runner.yield_to_requests()  # a user's request first
            job = await runner.read(runner.background(service.prepare_supersede), row.slug)
            if job is not None:
                await asyncio.to_thread(service.judge_supersedes_llm, job)
                if job.verdicts:
                    await runner.yield_to_requests()
                    await runner.write(runner.background(service.apply_supersede), job)
                errors = job.llm_errors
        except NotFound:
            pass  # deleted or forgotten meanwhile: nothing is left to judge
        except MemorydError as exc:
            errors = [exc.message]  # waits, like an LLM failure
        try:
            await runner.write(runner.background(service.settle_judge), row, errors)
        except MemorydError as exc:
            logger.warning("supersede judging of %s stays queued: %s", row.slug, exc)
            continue
        settled += 1
    return settled
