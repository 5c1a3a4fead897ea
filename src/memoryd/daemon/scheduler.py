"""The daemon's scheduler: due maintenance jobs (decay daily, the digest and the identity
weekly, the profile report monthly), catching up missed runs, each on the writer, except the
digest, which only reads and waits on mail servers, so it runs beside the writer, and the
identity rewrite's LLM call, which runs off it: agents' writes never wait for either."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from memoryd.api.runner import ServiceRunner
from memoryd.config import Settings
from memoryd.errors import MemorydError
from memoryd.governance import schedule
from memoryd.service import MemoryService

logger = logging.getLogger(__name__)


async def run_due(service: MemoryService, runner: ServiceRunner, started: datetime) -> list[str]:
    """Run the jobs due now; a failure is recorded in governance.db (and retried when the
    job says so) and the next job still runs. Returns the names of those that ran."""
    due = await runner.read(service.due_jobs, started)
    for name in due:
        try:
            await runner.yield_to_requests()  # a sweep starts between requests
            if name == "identity":
                job = await runner.read(service.prepare_profile, scheduled=True)
                await asyncio.to_thread(service.profile_llm, job)
                await runner.write(service.apply_profile, job)
            elif not schedule.job(name).on_writer:
                await runner.read(runner.background(service.run_job), name)
            else:
                await runner.write(runner.background(service.run_job), name)
        except MemorydError as exc:
            logger.warning("scheduled %s failed: %s", name, exc)
    return due


async def run_schedules(
    service: MemoryService, runner: ServiceRunner, settings: Settings, started: datetime
) -> None:
    """Poll for due jobs every `schedule.poll_s` seconds, for as long as the daemon runs."""
    while True:
        await asyncio.sleep(settings.schedule.poll_s)
        try:
            ran = await run_due(service, runner, started)
        except MemorydError as exc:
            logger.warning("scheduled jobs not run: %s", exc)
            continue
        if ran:
            logger.info("ran scheduled %s", ", ".join(ran))
