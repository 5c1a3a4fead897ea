"""A batch judged before its write builds only the pairs some rule may decide
(`find_pairs_batch(rules_only=True)`): those of every pair `may_supersede` keeps, with the
same shared names, and the same verdicts as from every pair."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.governance import supersede
from memoryd.governance.supersede_rules import may_supersede
from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService
from tests.integration.test_small_writes import NOTES as SMALL_WRITES_NOTES

NOTES = [
    *SMALL_WRITES_NOTES,
    ("decision", "We use npm", "We use npm for the web app; Vite builds it."),
    ("decision", "We use pnpm", "We use pnpm for the web app; Vite builds it."),
    (
        "decision",
        "Run our own cluster",
        "We decided to run PostgreSQL ourselves rather than using Aurora.",
    ),
    ("decision", "Aurora", "Use Aurora for the billing database."),
]


def test_a_batch_before_its_write_builds_the_pairs_a_rule_may_decide_with_the_same_verdicts(
    svc: MemoryService, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def drafts(first: int, rounds: int) -> list[MemoryDraft]:
        return [
            MemoryDraft(
                type=MemoryType(kind),
                title=f"{title} ({r})",
                body=body,
                scope_path=project,
                created_at=start + timedelta(minutes=first + r * len(NOTES) + i),
                allow_duplicate=True,
            )
            for r in range(rounds)
            for i, (kind, title, body) in enumerate(NOTES)
        ]

    svc.record_many(drafts(0, 2))
    seen: list[tuple[dict[str, list[supersede.Pair]], dict[str, list[supersede.Pair]]]] = []
    texts: dict[str, str] = {}
    real = supersede.find_pairs_batch

    def both(graph: Any, newers: Any, batch: Any, **kwargs: Any) -> Any:
        texts.update({m.slug: supersede.pair_texts(m.meta.title, m.body) for m in newers})
        every = real(graph, newers, batch, **{**kwargs, "rules_only": False})
        some = real(graph, newers, batch, **kwargs)
        seen.append((every, some))
        return some

    monkeypatch.setattr(supersede, "find_pairs_batch", both)
    written = svc.record_many(drafts(100, 2))
    assert len(seen) == 1  # judged before its write, from the pairs a rule may decide
    every, some = seen[0]
    kept = dropped = 0
    for newer, pairs in every.items():
        text = texts[newer]
        assert some[newer] == [p for p in pairs if may_supersede(text, p.older_text)]
        kept += len(some[newer])
        dropped += len(pairs) - len(some[newer])
        verdicts = []
        for found in (pairs, some[newer]):
            job = supersede.SupersedeJob(newer, text, list(found))
            supersede.judge_pairs(job)
            verdicts.append(job.verdicts)
        assert verdicts[0] == verdicts[1]
    assert kept
    assert dropped
    decided = [d for m in written for d in svc.get(m.slug).meta.supersede_decisions]
    judges = {d.judge for d in decided}
    assert judges >= {"rule:switch-from-to", "rule:single-valued"}, judges
