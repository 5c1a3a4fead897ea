"""What the data build scripts share (build time only, never imported by memoryd): their
build-time packages, the census first names, the surfaces the shipped data already claims,
and the everyday-word test."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "src" / "memoryd" / "extraction" / "data"


def build_module(name: str) -> Any:
    """A build-time package (no stubs; not a dependency of memoryd)."""
    return importlib.import_module(name)


def words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def census_percents() -> dict[str, tuple[float, float]]:
    """First name (capitalised) -> (percent of men, percent of women) with it, from the 1990
    US census lists in the `names` package."""
    folder = Path(build_module("names").__file__).parent
    percents: dict[str, list[float]] = {}
    for column, file in enumerate(("dist.male.first", "dist.female.first")):
        for line in (folder / file).read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) < 2 or not re.fullmatch(r"[A-Z]+", parts[0]):
                continue
            percents.setdefault(parts[0].capitalize(), [0.0, 0.0])[column] = float(parts[1])
    return {name: (men, women) for name, (men, women) in percents.items()}


def data_surfaces(*paths: Path) -> set[str]:
    """Casefolded names and aliases of JSON-lines data files (lexicon.jsonl, places.jsonl)."""
    surfaces: set[str] = set()
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                surfaces.update(s.casefold() for s in (row["name"], *row.get("aliases", ())))
    return surfaces


def everyday_words(common_words: Path) -> frozenset[str]:
    """Frequent words that are also lower-case dictionary words ("reading", not "london")."""
    common = {w.strip() for w in common_words.read_text(encoding="utf-8").split()}
    web2 = build_module("english_words").get_english_words_set(["web2"], lower=False, alpha=True)
    return frozenset(common & {w for w in web2 if w.islower()})
