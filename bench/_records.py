"""The real decision-record set (tests/data/supersede/records/) as the benches load it.

Each repository folder holds its records byte for byte, a `truth.yaml` (what the records
state about each other: `supersedes`, `amends`, each record's date) and, for the recall
bench, a `questions.yaml`. A team importing its ADR folder records every record as a
`decision` memory in one `record_many` call: `import_repo` does exactly that, in created_at
order, with the title from the record's first `#` heading (else its front matter `title:`,
else the file name) and the whole record as the body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from memoryd.models import MemoryDraft, MemoryType
from memoryd.service import MemoryService

RECORDS = Path(__file__).resolve().parent.parent / "tests" / "data" / "supersede" / "records"
_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
_FRONT_TITLE = re.compile(r"\A---\n(?:.*\n)*?title:\s*(.+?)\s*\n(?:.*\n)*?---\n")


@dataclass(frozen=True)
class Edge:
    """A relation the records state: `newer` replaces (or amends) `older`, by file name."""

    newer: str
    older: str
    named: bool = True


@dataclass
class Repo:
    """One repository's records, in the order a team records them (by date, then number)."""

    name: str
    path: Path
    files: list[str]
    dates: dict[str, date]
    supersedes: list[Edge]
    amends: list[Edge]
    questions: list[dict[str, Any]] = field(default_factory=list)

    def text(self, file: str) -> str:
        return (self.path / file).read_text(encoding="utf-8")

    def created_at(self, file: str) -> datetime:
        """The record's date at 10:00 UTC, a minute apart per place in the order so records
        of one day keep their number order (judging counts the same second as older)."""
        day = self.dates[file]
        return datetime(day.year, day.month, day.day, 10, tzinfo=UTC) + timedelta(
            minutes=self.files.index(file)
        )


def title_of(text: str, file: str) -> str:
    """The record's first `#` heading, else its front matter `title:`, else its file name."""
    body = text
    front = _FRONT_TITLE.match(text)
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        body = text[end + 5 :] if end >= 0 else text
    heading = _H1.search(body)
    if heading:
        return heading.group(1).strip()
    if front:
        return front.group(1).strip().strip("'\"")
    return Path(file).stem.replace("-", " ")


def load(root: Path = RECORDS, only: set[str] | None = None) -> list[Repo]:
    """Every repository folder under `root` (or those named in `only`, as `owner/name`)."""
    repos = []
    for folder in sorted(p for p in root.iterdir() if (p / "truth.yaml").is_file()):
        truth = yaml.safe_load((folder / "truth.yaml").read_text(encoding="utf-8"))
        if only is not None and truth["repository"] not in only:
            continue
        dates = {r["file"]: date.fromisoformat(str(r["date"])) for r in truth["records"]}
        number_order = [r["file"] for r in truth["records"]]
        files = sorted(number_order, key=lambda f: (dates[f], number_order.index(f)))
        questions_file = folder / "questions.yaml"
        questions = (
            yaml.safe_load(questions_file.read_text(encoding="utf-8"))
            if questions_file.is_file()
            else []
        )
        repos.append(
            Repo(
                name=truth["repository"],
                path=folder,
                files=files,
                dates=dates,
                supersedes=[
                    Edge(e["newer"], e["older"], bool(e.get("named", True)))
                    for e in truth["supersedes"]
                ],
                amends=[Edge(e["newer"], e["older"]) for e in truth.get("amends") or []],
                questions=questions or [],
            )
        )
    if only is not None and {r.name for r in repos} != only:
        missing = only - {r.name for r in repos}
        raise SystemExit(f"no records for {', '.join(sorted(missing))} under {root}")
    return repos


def drafts(repo: Repo, scope: Path) -> list[MemoryDraft]:
    """One `decision` draft per record, in created_at order."""
    out = []
    for file in repo.files:
        text = repo.text(file)
        out.append(
            MemoryDraft(
                type=MemoryType.DECISION,
                title=title_of(text, file)[:200],
                body=text,
                scope_path=scope,
                created_at=repo.created_at(file),
                source="adr-import",
                allow_duplicate=True,
            )
        )
    return out


def import_repo(svc: MemoryService, repo: Repo, scope: Path) -> dict[str, str]:
    """Record the repository's records in one `record_many` call; slug → file name."""
    scope.mkdir(parents=True, exist_ok=True)
    written = svc.record_many(drafts(repo, scope))
    if len(written) != len(repo.files):
        raise SystemExit(f"{repo.name}: {len(written)} memories for {len(repo.files)} records")
    return {memory.slug: file for memory, file in zip(written, repo.files, strict=True)}


EDGE_QUERY = (
    "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory) RETURN n.slug, o.slug, r.status,"
    " r.confidence, r.decided_by, r.judge, r.reason ORDER BY n.slug, o.slug"
)


def supersede_edges(svc: MemoryService, slug_to_file: dict[str, str]) -> list[dict[str, Any]]:
    """Every SUPERSEDES edge between these memories, as file names with its provenance."""
    rows = svc.graph.cypher(EDGE_QUERY, limit=1_000_000).rows
    out = []
    for newer, older, status, confidence, decided_by, judge, reason in rows:
        if newer in slug_to_file and older in slug_to_file:
            out.append(
                {
                    "newer": slug_to_file[newer],
                    "older": slug_to_file[older],
                    "status": status,
                    "confidence": float(confidence if confidence is not None else 1.0),
                    "decided_by": decided_by,
                    "judge": judge,
                    "reason": reason,
                }
            )
    return out
