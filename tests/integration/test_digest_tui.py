"""Issue 16, `memoryd digest --tui`: textual's pilot presses the keys against a real service
over a temp home, and the decisions land in governance.db, the graph and the vault."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memoryd.cli.digest_tui import DigestApp
from memoryd.config import Settings
from memoryd.models import DecayState
from memoryd.wiring import open_service
from tests.integration.test_digest import populate


def test_walk_the_queue_and_decide_with_single_keys(settings: Settings, project: Path) -> None:
    with open_service(settings) as svc:
        v = populate(svc, project)
        digest = svc.digest(scope=project)
        newest, oldest = sorted(v.promotions, reverse=True)
        app = DigestApp(svc, digest)

        async def walk() -> list[str]:
            said = []
            async with app.run_test() as pilot:
                # row 0: the newest promotion, approved
                await pilot.press("a")
                said.append(app.status)
                # row 1: the other promotion; m is for duplicates only, then r rejects it
                await pilot.press("m")
                said.append(app.status)
                await pilot.press("r")
                said.append(app.status)
                # row 2: the supersede candidate, accepted; k goes back up, a says it is done
                await pilot.press("a")
                said.append(app.status)
                await pilot.press("k", "a")
                said.append(app.status)
                # row 3: the fingerprint pair: r is refused, m merges; row 4 skipped with s
                await pilot.press("j", "r")
                said.append(app.status)
                await pilot.press("m")
                said.append(app.status)
                await pilot.press("s", "q")
            return said

        said = asyncio.run(walk())
        assert said[0].startswith(f"promotion:{newest}: promoted as promoted-{newest}-")
        assert said[1] == "m merges duplicate pairs; here a approves and r rejects"
        assert said[2] == f"promotion:{oldest}: rejected"
        assert said[3].startswith(f"supersede:{v.candidate[0]}:{v.candidate[1]}: accepted")
        assert said[4] == f"supersede:{v.candidate[0]}:{v.candidate[1]} was accepted already"
        assert said[5] == "a duplicate pair has no reject: m merges it, s skips it"
        twin, copy = v.fingerprint_pair
        assert said[6] == f"duplicate:{twin}:{copy}: merged into {twin}"

        # governance.db: one promoted, one rejected, with the reason the TUI gives
        approved, rejected = svc.get_promotion(newest), svc.get_promotion(oldest)
        assert (approved.status, rejected.status) == ("approved", "rejected")
        assert rejected.decision_reason == "rejected in the digest"
        assert approved.promoted_slug is not None
        assert svc.get(approved.promoted_slug).meta.promoted_from == approved.source_slug
        # the graph: the candidate is an active supersede, decided in the digest
        [edge] = svc.supersedes_chain(v.candidate[1])
        assert (edge.status, edge.decided_by) == ("active", "digest")
        # the pair merged: the copy is archived into the twin, the near pair untouched
        assert svc.get(copy).meta.model_dump()["merged_into"] == twin
        assert svc.graph.get_memory(v.near_pair[1]) is not None
        after = svc.digest(scope=project)
        assert after.totals["promotions"] == 0
        assert after.totals["supersede"] == 0
        assert [(p.keep, p.drop) for p in after.duplicates] == [v.near_pair]


def test_unknown_or_decided_ids_say_so_and_the_app_goes_on(
    settings: Settings, project: Path
) -> None:
    with open_service(settings) as svc:
        v = populate(svc, project)
        digest = svc.digest(scope=project)
        # ids the service does not know (deleted meanwhile, or never there) …
        gone = digest.promotions[0].model_copy(update={"id": 10**6})
        stale = digest.model_copy(update={"promotions": [gone, *digest.promotions[1:]]})
        # … and items decided elsewhere after the digest was built
        svc.decide_supersede(*v.candidate, "reject")
        svc.merge(*v.fingerprint_pair[:1], [v.fingerprint_pair[1]])
        app = DigestApp(svc, stale)

        async def walk() -> list[str]:
            said = []
            async with app.run_test() as pilot:
                await pilot.press("a")
                said.append(app.status)
                await pilot.press("j", "j", "a")  # past the pending promotion
                said.append(app.status)
                await pilot.press("m")
                said.append(app.status)
                await pilot.press("j", "m")
                said.append(app.status)
                await pilot.press("q")
            return said

        said = asyncio.run(walk())
        assert said[0].startswith("error: no promotion 1000000")
        assert said[1].startswith(
            f"error: cannot accept {v.candidate[0]} → {v.candidate[1]}: it is rejected"
        )
        assert said[2] == "m merges duplicate pairs; here a approves and r rejects"
        assert said[3].startswith("error: ")
        assert v.fingerprint_pair[1] in said[3]
        # nothing else changed: the other promotion is still pending
        assert svc.get_promotion(digest.promotions[1].id).status == "pending"
        assert svc.get(v.overdue).meta.decay_state is DecayState.ALIVE


def test_an_empty_queue_says_so(settings: Settings) -> None:
    with open_service(settings) as svc:
        app = DigestApp(svc, svc.digest())

        async def walk() -> str:
            async with app.run_test() as pilot:
                await pilot.press("a", "r", "m", "s", "j", "k")
                said = app.status
                await pilot.press("q")
            return said

        assert asyncio.run(walk()) == "nothing waits for a decision: q quits"
