"""The daemon's reply to captures: `memoryd capture` drops index requests into `inbox/`; the
daemon indexes them and enriches them once the agent's hooks stop coming (DESIGN.md §2).

A capture never talks to the daemon, so the daemon cannot wait for it as it waits for a
request (`ServiceRunner.yield_to_requests`); the requests' files say when the last hooks
ran (`Inbox.arrivals`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from memoryd.errors import MemorydError
from memoryd.inbox import Inbox

if TYPE_CHECKING:
    from memoryd.api.runner import ServiceRunner
    from memoryd.config import Settings
    from memoryd.service import MemoryService

logger = logging.getLogger(__name__)

CAPTURES_QUIET_S = 1.0
"""The daemon reacts to captures (indexes them, enriches) once none arrived for this long: an
agent's hooks come in bursts (a Stop per turn, several agents at once), and the daemon's
writes beside the next hook make it wait, for the disk (its fsync) more than for the cores."""
CAPTURES_WAIT_MAX_S = 10.0
"""...and at the latest once the oldest waiting capture is this old: a steady stream of
captures is still indexed."""


async def watch_inbox(
    service: MemoryService, runner: ServiceRunner, settings: Settings, drained: asyncio.Event
) -> None:
    """`memoryd capture` only drops requests into inbox/ (it never talks to the graph owner,
    to stay within an agent hook's time budget): index them as they arrive, and set `drained`
    when that indexed something. Background work: it waits until captures stop arriving
    (`captures_settled`) and for requests, and runs at low priority, so the agent's next
    hook, which may be running already, is not slowed by it."""
    inbox = Inbox(service.home)
    while True:
        await asyncio.sleep(settings.daemon.inbox_poll_s)
        try:
            if not await asyncio.to_thread(inbox.waiting):
                continue
            await captures_settled(inbox)
            await runner.yield_to_requests()
            if await runner.write(runner.background(service.drain_inbox)):
                drained.set()
        except MemorydError as exc:
            logger.warning("inbox not drained: %s", exc)


async def captures_settled(inbox: Inbox) -> float:
    """Wait while captures keep arriving: until the newest waiting request is
    `CAPTURES_QUIET_S` old, or the oldest `CAPTURES_WAIT_MAX_S`. Returns the wait."""
    started = time.monotonic()
    while (ages := await asyncio.to_thread(inbox.arrivals)) is not None:
        newest, oldest = ages
        if newest >= CAPTURES_QUIET_S or oldest >= CAPTURES_WAIT_MAX_S:
            break
        await asyncio.sleep(max(0.05, min(CAPTURES_QUIET_S - newest, CAPTURES_WAIT_MAX_S - oldest)))
    return time.monotonic() - started
