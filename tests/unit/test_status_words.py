"""The plain status words the graph filters a scope's bodies on (`status_lines.STATUS_WORDS`,
`FOLDED`) keep every body the status keywords match: on the real decision records, the
labelled pairs, and case and letter variants."""

from __future__ import annotations

import re
from pathlib import Path

from memoryd.governance.status_lines import FOLDED, STATUS_KEYWORDS, STATUS_WORDS

DATA = Path(__file__).resolve().parents[1] / "data" / "supersede"


def _kept(text: str) -> bool:
    lowered = text.lower()
    return any(w in lowered for w in STATUS_WORDS) or any(c in text for c in FOLDED)


def test_every_text_the_keywords_match_holds_a_status_word() -> None:
    texts = [p.read_text(encoding="utf-8") for p in sorted(DATA.rglob("*")) if p.is_file()]
    lines = [line for text in texts for line in text.splitlines()]
    matched = [t for t in lines if re.search(STATUS_KEYWORDS, t)]
    assert len(matched) > 50  # real records say "Superseded by", "Status: Deprecated", …
    assert [t for t in matched if not _kept(t)] == []


def test_case_and_letter_variants_are_kept() -> None:
    variants = [
        "SUPERSEDED BY ADR-2",
        "Replaced By the new queue",
        "ſuperſeded by 0004",  # long s: matched as an s
        "RETİRED in March",  # dotted capital I: lower-cases to two characters
        "untıl now we used Kafka",  # dotless i
        "In Favour Of Redis",
        "被 ADR-5 取代",
    ]
    for text in variants:
        assert re.search(STATUS_KEYWORDS, text), text
        assert _kept(text), text
    assert not _kept("Kafka moves to Redis streams")
