"""Supersede judging's shortcuts decide nothing: on the real decision records and the labelled
pairs, a pair `may_supersede` drops gets no verdict from the rules, the wording read once per
sentence holds every match of the replacement patterns, and the lexicon read at its candidate
places finds what the whole lexicon pattern finds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from memoryd.governance.supersede_names import Name, _lexicon_matches, _lexicon_pattern
from memoryd.governance.supersede_pairs import pair_texts
from memoryd.governance.supersede_patterns import (
    _FROM_TO,
    _FROM_TO_NEEDS,
    _INSTEAD,
    _NO_LONGER,
    _SWITCH_TO,
    _WENT_BACK,
    _sentences,
    _wording,
)
from memoryd.governance.supersede_rules import _judge, judge_by_rules, may_supersede

DATA = Path(__file__).resolve().parents[1] / "data" / "supersede"
FOLDERS = sorted(
    p
    for root in (DATA / "records", DATA / "heldout")
    for p in root.iterdir()
    if (p / "truth.yaml").is_file()
)
EDGES = [
    "ſqlite and KUBERNETES, Kubernetes-operator, use.react, @vue/cli, x-react, React.js.",
    "İstio or ıstio; Node.js v18; the K8s cluster (K8S); go vs Go; GO; 格式化工具用 black。",
    "\u212aubernetes and \u212a8s (the Kelvin sign); ǅango; ﬀmpeg or FFmpeg; GITHUB ACTIONS.",
    "我们从 MySQL 切到 PostgreSQL，用 pnpm 替换了 npm；Redis 已被 Valkey 取代。",
    "npm was replaced by pnpm. REPLACED BY nothing; Jenkins were replacéd with GitHub Actions.",
    "Jenkins was replaced with GitHub Actions; Webpack has been REPLACED by Vite.",
]

ONE_PER_RULE = [
    # What each part of `may_supersede` lets through (cloud-platform 022/014 and 040/033).
    (
        "rule:adopts-declined",
        "EKS\n\nUse Amazon EKS for running the main cluster.",
        "Why we build our own kubernetes cluster\n\nWe decided to manage the kubernetes"
        " cluster ourselves rather than using EKS mainly for the below reasons.",
    ),
    (
        "rule:retires-record",
        "Later\n\n- We will decomission our management cluster once the move is done",
        "33 Manager cluster\n\nWe have a 'Manager cluster', for running CI/CD (Concourse).",
    ),
    ("rule:single-valued", "We use pnpm for the monorepo.", "We use npm for the monorepo."),
    ("rule:replace-with", "Replace npm with pnpm across the monorepo.", "Package manager is npm."),
]


def _records() -> list[list[str]]:
    """Each repository's records as judging reads them (title, then the file's text)."""
    out = []
    for folder in FOLDERS:
        texts = []
        for path in sorted(folder.glob("*.md")):
            text = path.read_text(encoding="utf-8")
            heading = re.search(r"^#\s+(.+)$", text, re.MULTILINE)
            texts.append(pair_texts(heading.group(1) if heading else path.stem, text))
        out.append(texts)
    return out


def _labelled() -> list[tuple[str, str]]:
    pairs = yaml.safe_load((DATA / "pairs.yaml").read_text(encoding="utf-8"))
    return [(str(p["newer"]), str(p["older"])) for p in pairs]


def _texts() -> list[str]:
    return [
        *(t for texts in _records() for t in texts),
        *(t for pair in _labelled() for t in pair),
        *EDGES,
    ]


def _shared(newer: str, older: str) -> tuple[Name, ...]:
    """Capitalised words both texts hold, as the graph's tools both memories mention."""
    words = set(re.findall(r"\b[A-Z][\w.+#-]{2,}", newer)) & set(
        re.findall(r"\b[A-Z][\w.+#-]{2,}", older)
    )
    return tuple(Name(w, (w,), "tool") for w in sorted(words)[:6])


@pytest.mark.parametrize(
    ("judge", "newer", "older"), ONE_PER_RULE, ids=[r[0] for r in ONE_PER_RULE]
)
def test_each_rule_s_pairs_pass(judge: str, newer: str, older: str) -> None:
    verdict = _judge(newer, older, ())
    assert verdict is not None
    assert verdict.judge == judge
    assert may_supersede(newer, older)


def test_a_pair_that_may_not_supersede_gets_no_verdict_from_any_rule() -> None:
    pairs = [(n, o) for texts in _records() for n in texts for o in texts if n is not o]
    pairs += [*_labelled(), *((o, n) for n, o in _labelled())]
    dropped = decided = 0
    for newer, older in pairs:
        for known in ((), _shared(newer, older)):
            verdict = _judge(newer, older, known)
            decided += verdict is not None
            if not may_supersede(newer, older):
                dropped += 1
                assert verdict is None, (newer[:80], older[:80], verdict)
            assert judge_by_rules(newer, older, known) == verdict
    assert dropped > len(pairs) // 2  # a third of the real pairs are dropped ...
    assert decided > 100  # ... and the rules decide many of the rest


@pytest.mark.parametrize("text", _texts()[:1] + EDGES, ids=range(len(EDGES) + 1))
def test_the_lexicon_at_its_candidate_places_finds_what_the_whole_pattern_finds(
    text: str,
) -> None:
    whole = [(m.start(), m.group(0)) for m in _lexicon_pattern().finditer(text)]
    assert [(m.start(), m.group(0)) for m in _lexicon_matches(text)] == whole


def test_the_lexicon_shortcut_on_every_real_text() -> None:
    found = 0
    for text in _texts():
        whole = [(m.start(), m.group(0)) for m in _lexicon_pattern().finditer(text)]
        assert [(m.start(), m.group(0)) for m in _lexicon_matches(text)] == whole, text[:80]
        found += len(whole)
    assert found > 1000


def test_a_sentence_without_wording_matches_no_replacement_pattern() -> None:
    patterns = [rx for _, rx in (*_FROM_TO, *_INSTEAD, *_NO_LONGER, *_SWITCH_TO)]
    worded = 0
    for sentence in {s for text in _texts() for s in _sentences(text)}:
        wording = _wording(sentence)
        if wording is None:
            assert not any(rx.search(sentence) for rx in (*patterns, _WENT_BACK)), sentence
            continue
        worded += 1
        # The words searched first are in every match of their patterns.
        assert wording.from_to == tuple(
            (rule, m.group("old"), m.group("new"))
            for rule, rx in _FROM_TO
            for m in rx.finditer(sentence)
        )
    for rule, rx in _FROM_TO:
        if rule in _FROM_TO_NEEDS:
            assert rx.search("X was replaced by Y" if rule == "replaced-by" else "甲被乙取代")
    assert worded > 100
