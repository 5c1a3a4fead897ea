"""Thirty real decision records recorded the way a team imports its ADR folder: one
`record_many`. No memory may end up superseded that the records do not say is, and the
replacements they state must be found (issue 27: the old rules superseded 78 of 110)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService

RECORDS = Path(__file__).resolve().parents[1] / "data" / "supersede" / "records"
REPO = RECORDS / "ministryofjustice__modernisation-platform"


def title_of(text: str, stem: str) -> str:
    """The record's first heading, as a team's import would title it."""
    heading = re.search(r"^#\s+(.+)$", text, re.MULTILINE)
    return heading.group(1).strip() if heading else stem


def decision_of(
    record: dict[str, Any], project: Path, i: int, created_at: datetime | None = None
) -> MemoryDraft:
    """The i-th record of truth.yaml as a decision draft: its file's text, titled by its
    first heading, dated noon of its date (plus i seconds, to keep the order) unless
    `created_at` is given."""
    text = (REPO / record["file"]).read_text(encoding="utf-8")
    day = record["date"]
    return MemoryDraft(
        type=MemoryType.DECISION,
        title=title_of(text, Path(record["file"]).stem),
        body=text,
        scope_path=project,
        created_at=created_at
        or datetime(day.year, day.month, day.day, 12, tzinfo=UTC) + timedelta(seconds=i),
    )


def test_thirty_real_records_in_one_record_many_supersede_only_what_they_state(
    svc: MemoryService, project: Path
) -> None:
    truth = yaml.safe_load((REPO / "truth.yaml").read_text(encoding="utf-8"))
    records = truth["records"][:30]
    files = [r["file"] for r in records]
    drafts = [decision_of(record, project, i) for i, record in enumerate(records)]
    written = svc.record_many(drafts)
    file_of = {m.slug: f for m, f in zip(written, files, strict=True)}
    stated = {
        (s["newer"], s["older"])
        for s in truth["supersedes"]
        if s["newer"] in files and s["older"] in files
    }
    assert len(stated) == 2  # 0003 replaces 0002, 0019 replaces 0004

    rows = svc.graph.cypher(
        "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) RETURN n.slug, o.slug, r.status, r.reason",
        {},
        limit=10_000,
    ).rows
    edges = {(file_of[n], file_of[o]): (status, reason) for n, o, status, reason in rows}
    invented = {pair: why for pair, why in edges.items() if pair not in stated}
    assert invented == {}
    assert set(edges) == stated  # each found, automatic or as a candidate
    assert {status for status, _ in edges.values()} == {"active"}
    superseded = [m.slug for m in written if svc.graph.superseded_by([m.slug])]
    assert sorted(file_of[s] for s in superseded) == sorted(older for _, older in stated)
    # The result of the import shows what judging wrote.
    newer = {file_of[m.slug]: m for m in written}
    assert newer["0003-use-aws-sso.md"].meta.supersedes
