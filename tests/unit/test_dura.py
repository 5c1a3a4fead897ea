"""heuristic-v1, the offline DURA scorer: its rules, its quotes, and its agreement with the
labelled set `tests/data/dura/` (issue 15: precision on "promote" >= 0.8)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from memoryd.enrichment import content_fingerprint
from memoryd.errors import BrokenMemoryFile
from memoryd.extraction.pipeline import Extractor
from memoryd.governance.analyze import (
    HEURISTIC,
    Candidate,
    SessionText,
    promotes,
    score_heuristic,
)
from memoryd.memfile import split_summary
from memoryd.models import Dura, Memory, MemoryType
from memoryd.vault import parse

DURA = Path(__file__).parents[1] / "data" / "dura"


def labelled() -> list[tuple[str, str, str, Memory]]:
    rows = []
    for line in (DURA / "labels.tsv").read_text("utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, label, language = line.split("\t")
            rows.append(
                (name, label, language, parse((DURA / name).read_text("utf-8"), DURA / name))
            )
    return rows


def session_text(memory: Memory, extractor: Extractor | None = None) -> SessionText:
    text = split_summary(memory.body)[1]
    found = extractor.extract(text, title=memory.meta.title) if extractor else None
    return SessionText(
        slug=memory.slug,
        title=memory.meta.title,
        text=text,
        fingerprint=content_fingerprint(memory),
        scope_hash=memory.meta.scope_hash,
        entities=tuple(dict.fromkeys(e.name for e in found.entities)) if found else (),
    )


def plain(text: str, entities: tuple[str, ...] = ()) -> SessionText:
    return SessionText("s", "A session", text, "f" * 40, "0" * 12, entities)


@pytest.fixture(scope="module")
def extractor() -> Extractor:
    return Extractor()


def test_the_labelled_set_is_big_enough_and_bilingual() -> None:
    rows = labelled()
    assert len(rows) >= 40
    assert Counter(lang for _, _, lang, _ in rows) >= Counter({"en": 15, "zh": 15})
    labels = Counter((label, lang) for _, label, lang, _ in rows)
    assert all(labels[(label, lang)] >= 8 for label in ("promote", "skip") for lang in ("en", "zh"))
    assert all(m.meta.type is MemoryType.SESSION for *_, m in rows)


def test_heuristic_precision_on_promote_is_at_least_0_8(extractor: Extractor) -> None:
    """The number bench/governance.py records (with the extractor's linked entities, as the
    enrichment worker has them)."""
    tp = fp = fn = 0
    for _, label, _, memory in labelled():
        predicted = promotes(score_heuristic(session_text(memory, extractor)), 0.6)
        tp += predicted and label == "promote"
        fp += predicted and label == "skip"
        fn += not predicted and label == "promote"
    assert tp / (tp + fp) >= 0.8
    assert tp / (tp + fn) >= 0.6  # and it does not get there by proposing nothing


def test_proposals_only_quote_the_session(extractor: Extractor) -> None:
    for name, _, _, memory in labelled():
        session = session_text(memory, extractor)
        proposal = score_heuristic(session)
        assert proposal.dura.by == HEURISTIC
        for quote in proposal.evidence:
            assert quote in session.text, name
        for line in proposal.proposed_body.splitlines():
            assert line.removeprefix("- ") in session.text or line == session.title, name
        assert proposal.proposed_title.rstrip("…") in f"{session.title}\n{session.text}", name
        for trigger in proposal.proposed_triggers:
            assert trigger.casefold() in session.text.casefold(), (name, trigger)


def test_english_decision_rule_and_switch_cues() -> None:
    proposal = score_heuristic(
        plain(
            "## Decided / concluded\n"
            "- We switched the queue from Celery to Dramatiq because retries were lost.\n"
            "- From now on every task must be idempotent.\n\n"
            "## Final answer\nAll 42 tests pass.",
            ("Celery", "Dramatiq"),
        )
    )
    assert proposal.proposed_type is MemoryType.DECISION
    assert proposal.evidence[0].startswith("We switched the queue from Celery to Dramatiq")
    assert "1 decision, 1 rule" in proposal.reasoning
    assert proposal.dura.D >= 0.5
    assert proposal.proposed_triggers[:2] == ["Celery", "Dramatiq"]


def test_chinese_cues_and_quotes() -> None:
    proposal = score_heuristic(
        plain(
            "## Decided / concluded\n- 决定把缓存改用 Redis,因为多实例要共享。\n"
            "- 以后所有接口都必须设置超时。\n\n## Final answer\n测试通过。",
            ("Redis",),
        )
    )
    assert proposal.evidence == [
        "决定把缓存改用 Redis,因为多实例要共享。",
        "以后所有接口都必须设置超时。",
    ]
    assert "(one gives its reason)" in proposal.reasoning
    assert "1 verification cue" in proposal.reasoning
    assert proposal.dura.A == 0.7
    assert proposal.dura.D >= 0.5
    assert proposal.dura.R == 0.12  # one linked entity, nothing else to recall it by


def test_questions_deferrals_and_hedges_are_not_evidence() -> None:
    asked = score_heuristic(
        plain(
            "## Asked\n- Should we always pin the Rust toolchain?\n"
            "- Why does the release build take 9 minutes?\n\n"
            "## Final answer\nNothing decided yet; it needs a product decision."
        )
    )
    assert asked.evidence == []
    assert asked.dura.D == 0.0
    assert "2 unanswered question(s)" in asked.reasoning
    assert asked.dura.A == 0.4
    hedged = score_heuristic(plain("- Maybe we should switch to uv, I think."))
    assert hedged.dura.A < 0.6
    answered = score_heuristic(
        plain(
            "## Asked\n- Why does the release build take 9 minutes?\n\n"
            "## Final answer\nThe release build takes 9 minutes because LTO runs twice."
        )
    )
    assert "0 unanswered question(s)" in answered.reasoning


def test_trivial_evidence_counts_half() -> None:
    trivial = score_heuristic(plain("- We decided to rename the helper to load_rows."))
    real = score_heuristic(plain("- We decided to move the helper to the storage layer."))
    assert pytest.approx(real.dura.D / 2, abs=0.011) == trivial.dura.D


def test_supersedes_only_what_a_switch_left() -> None:
    text = "- We replaced Redux with Zustand because the store had 40 reducers."
    candidates = (
        Candidate("2026-01-02-redux-for-state-aa11bb", "Use Redux for state"),
        Candidate("2026-01-03-zustand-docs-cc22dd", "Zustand docs link"),
    )
    proposal = score_heuristic(plain(text), candidates)
    assert proposal.proposed_supersedes == ["2026-01-02-redux-for-state-aa11bb"]


def test_dura_by_is_validated_and_a_malformed_score_names_the_field(tmp_path: Path) -> None:
    assert Dura(D=0.1, U=0.2, R=0.3, A=0.4, by="llm:claude-haiku-4-5").by == "llm:claude-haiku-4-5"
    with pytest.raises(ValidationError, match="heuristic-v1"):
        Dura(D=0.1, U=0.2, R=0.3, A=0.4, by="vibes")
    path = tmp_path / "s.md"
    text = (DURA / "en-01-tantivy-fts.md").read_text("utf-8")
    broken = text.replace("recall_count: 0\n", "recall_count: 0\ndura_score:\n  D: high\n")
    with pytest.raises(BrokenMemoryFile, match=r"'dura_score\.D'"):
        parse(broken, path)
    extra = text.replace(
        "recall_count: 0\n", "recall_count: 0\ndura_score: {D: 1, U: 1, R: 1, A: 1, mean: 1}\n"
    )
    with pytest.raises(BrokenMemoryFile, match=r"'dura_score\.mean'"):
        parse(extra, path)
