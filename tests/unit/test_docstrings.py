"""Docstrings and comments in src/ say what the code does and why, not what a benchmark scored:
results, the numbers of thresholds tried and the questions asked live in bench/RESULTS.md, and
the code points there in one line. This check fails on a benchmark citation in the code."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

CITATIONS: dict[str, re.Pattern[str]] = {
    "a benchmark's name": re.compile(r"\b(?:DevMemBench|LoCoMo|LongMemEval|BEIR|MTEB)\b"),
    "a ranking metric with its value": re.compile(
        r"(?i)(?<![\w-])(?:MRR|AUC|nDCG|hit@\d+|all@\d+|recall@\d+|newest-first)\b[^.;\n]{0,30}?"
        r"\d\.\d"
    ),
    "a before → after figure": re.compile(r"\d(?:\.\d+)?\s*%?\s*(?:→|->)\s*\d"),
    "a latency percentile with its value": re.compile(r"\bp(?:50|90|95|99)\b[^.;\n]{0,20}?\d"),
    "a count of benchmark questions": re.compile(
        r"(?i)\b\d[\d,]* of [\d,]+ (?:questions|cases|queries)\b"
    ),
    "a measurement in a measured sentence": re.compile(
        r"(?i)\bmeasured\b[^.;\n]*?\d+(?:\.\d+)?\s*(?:ms|s|%|x|MB|KB)(?!\w)"
    ),
}
"""What a benchmark citation looks like. A pointer (`measured: bench/RESULTS.md`) and numbers
that are the code's own (a limit, a default, a format's sizes) are none of these."""


def texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every docstring (module, class, function, attribute) and comment."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
                and (i == 0 or isinstance(body[i - 1], ast.Assign | ast.AnnAssign))
            ):
                yield stmt.lineno, stmt.value.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def citations(text: str) -> list[str]:
    return [what for what, pattern in CITATIONS.items() if pattern.search(text)]


def test_no_docstring_or_comment_in_src_cites_a_benchmark() -> None:
    found = [
        f"{path.relative_to(SRC)}:{line}: {', '.join(kinds)}"
        for path in sorted(SRC.rglob("*.py"))
        for line, text in texts(path)
        if (kinds := citations(text))
    ]
    assert found == [], "move the figures to bench/RESULTS.md and point there in one line"


@pytest.mark.parametrize(
    "text",
    [
        "Measured on DevMemBench at 0.12: record 0.60 / 0.91.",
        "(LoCoMo multi-hop all@10 0.27 at half)",
        "lifts MRR 0.890 to 0.920 on the record path",
        "abstention AUC 0.88 against BM25's",
        "newest-first 0.54 → 0.69 at unchanged MRR",
        "the query's weight (before: 0.48 / 0.94, after 0.60 -> 0.91)",
        "recall p95 11.4 ms under load",
        "changed no question: 0 of 1,536 questions",
        "measured 3x faster here than TermSetQuery",
        "a full collection pass, measured at 9 s of CPU in a 100k import",
    ],
)
def test_the_check_catches_a_citation(text: str) -> None:
    assert citations(text) != []


@pytest.mark.parametrize(
    "text",
    [
        "The relevance below which `inject` adds nothing (measured: bench/RESULTS.md).",
        "a memory naming two rare things scores about 0.2, one holding half of it about 0.1",
        "alive → dim → soft-forgotten → forgotten",
        "Claude Code gives every SessionEnd hook 1.5 s together",
        "heuristic-v1 must stay under 20 ms",
        "(tests pass, measured, p95, confirmed, 测试通过 …; at most 3)",
        "Engine hazards measured on kuzu 0.11.3 shape this module",
    ],
)
def test_the_check_leaves_the_code_s_own_numbers_alone(text: str) -> None:
    assert citations(text) == []
