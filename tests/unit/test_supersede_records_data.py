"""The real decision-record set (tests/data/supersede/records/) is consistent with itself.

bench/supersede.py and bench/records.py score memoryd against this data: a truth edge whose
evidence is not in its record, a record missing from its truth file, or a question naming a
file that is not there would silently change what they measure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

RECORDS = Path(__file__).resolve().parents[1] / "data" / "supersede" / "records"
HELDOUT = RECORDS.parent / "heldout"
"""Repositories held out from tuning (bench/supersede.py --records tests/data/supersede/heldout)."""
FOLDERS = sorted(
    p for root in (RECORDS, HELDOUT) for p in root.iterdir() if (p / "truth.yaml").is_file()
)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_at_least_five_repositories_with_replacements_and_one_without() -> None:
    development = [f for f in FOLDERS if f.parent == RECORDS]
    truths = [yaml.safe_load((f / "truth.yaml").read_text(encoding="utf-8")) for f in development]
    assert len(truths) >= 5
    assert any(t["supersedes"] for t in truths)
    assert any(not t["supersedes"] for t in truths)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_truth_matches_the_records(folder: Path) -> None:
    truth = yaml.safe_load((folder / "truth.yaml").read_text(encoding="utf-8"))
    dates = {r["file"]: str(r["date"]) for r in truth["records"]}
    on_disk = {p.name for p in folder.glob("*.md")}
    assert set(dates) == on_disk, "every record is listed once in truth.yaml"
    assert truth["repository"] in (folder.parent / "SOURCES.md").read_text(encoding="utf-8")
    for p in folder.glob("*.md"):
        assert p.stat().st_size <= 100_000, f"{p.name} is over 100 KB"
        p.read_text(encoding="utf-8")  # UTF-8 as stored
    for edge in truth["supersedes"] + (truth.get("amends") or []):
        assert dates[edge["newer"]] > dates[edge["older"]], edge
        for evidence in edge["evidence"]:
            record = (folder / edge[evidence["in"]]).read_text(encoding="utf-8")
            assert _flat(evidence["text"]) in _flat(record), (edge["newer"], evidence["text"])
    stated = {(e["newer"], e["older"]) for e in truth["supersedes"]}
    for pair in truth.get("hard_negatives") or []:
        assert pair["newer"] in dates
        assert pair["older"] in dates
        assert (pair["newer"], pair["older"]) not in stated


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_questions_name_existing_records(folder: Path) -> None:
    path = folder / "questions.yaml"
    if not path.is_file():
        pytest.skip("no questions for this repository")
    questions = yaml.safe_load(path.read_text(encoding="utf-8"))
    truth = yaml.safe_load((folder / "truth.yaml").read_text(encoding="utf-8"))
    stated = {(e["newer"], e["older"]) for e in truth["supersedes"]}
    ids = [q["id"] for q in questions]
    assert len(ids) == len(set(ids))
    for q in questions:
        assert q["kind"] in {"decided", "why", "current", "none"}, q["id"]
        assert (q["kind"] == "none") == (not q["answer"]), q["id"]
        for file in q["answer"]:
            assert (folder / file).is_file(), (q["id"], file)
        if q["kind"] == "current":
            assert (q["answer"][0], q["stale"]) in stated, q["id"]
