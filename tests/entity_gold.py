"""The hand-labelled entity set of `tests/data/entities/` and its scoring, shared by
`bench/extraction.py --quality` and `tests/unit/test_extraction_quality.py`.

Two parts: the old one (`en.yaml`, `zh.yaml`), sentences written in the shape of coding
sessions, and the real one (`real_en.yaml`), sentences taken from public decision records and
READMEs (`SOURCES.md`), a third of them held out (`split: held-out`) from tuning.

An entity is right when its type and its merge key (`normalise_name`, after a lexicon alias
is mapped onto its canonical name, so "Postgres" = PostgreSQL) match a gold entity of the
same item; each gold entity is counted once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from memoryd.extraction.linking import normalise_name
from memoryd.extraction.pipeline import Extractor, load_lexicon

DATA_DIR = Path(__file__).parent / "data" / "entities"
LANGUAGES = ("en", "zh")
PRECISION_TARGET = 0.90
RECALL_TARGET = 0.70
REAL_FILE = "real_en.yaml"
SPLITS = ("tune", "held-out")
REAL_PRECISION_TARGET = 0.90
"""The real part's target (issue 27); it has no recall target."""


@dataclass(frozen=True)
class Item:
    lang: str
    text: str
    gold: tuple[tuple[str, str], ...]
    """(type, name) pairs."""
    note: str = ""
    source: str = ""
    """Where a real sentence was taken from (`SOURCES.md` key:path@commit)."""
    split: str = ""
    """`tune` or `held-out` for a real sentence."""


@dataclass
class Score:
    """Counts over a set of items; `misses` and `false` keep what went wrong, for reading."""

    true_positives: int = 0
    predicted: int = 0
    gold: int = 0
    false: list[tuple[str, str, str]] = field(default_factory=list)
    misses: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.true_positives / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.gold if self.gold else 1.0

    def as_json(self) -> dict[str, float | int]:
        return {
            "precision": round(self.precision, 3),
            "recall": round(self.recall, 3),
            "true_positives": self.true_positives,
            "predicted": self.predicted,
            "gold": self.gold,
        }


def load_real_items(splits: Iterable[str] = SPLITS) -> list[Item]:
    """The real part: sentences taken from public text, of the given splits."""
    wanted = set(splits)
    rows = yaml.safe_load((DATA_DIR / REAL_FILE).read_text(encoding="utf-8"))
    return [
        Item(
            "en",
            row["text"],
            tuple((str(kind), str(name)) for kind, name in row["gold"]),
            row.get("note", ""),
            row["source"],
            row["split"],
        )
        for row in rows
        if row["split"] in wanted
    ]


def load_items(languages: Iterable[str] = LANGUAGES) -> list[Item]:
    items: list[Item] = []
    for lang in languages:
        rows = yaml.safe_load((DATA_DIR / f"{lang}.yaml").read_text(encoding="utf-8"))
        for row in rows:
            gold = tuple((str(kind), str(name)) for kind, name in row["gold"])
            items.append(Item(lang, row["text"], gold, row.get("note", "")))
    return items


@cache
def _canonical() -> dict[str, str]:
    """Merge key of every lexicon surface → merge key of its canonical name."""
    out: dict[str, str] = {}
    for entry in load_lexicon():
        for surface in (entry.name, *entry.aliases):
            out.setdefault(normalise_name(surface), normalise_name(entry.name))
    return out


def entity_key(kind: str, name: str) -> tuple[str, str]:
    key = normalise_name(name)
    return kind, _canonical().get(key, key)


def score(extractor: Extractor, items: Sequence[Item]) -> dict[str, Score]:
    """Scores per language and `all`."""
    scores = {"all": Score()}
    for item in items:
        predicted = {
            entity_key(e.type.value, e.name): e.name for e in extractor.extract(item.text).entities
        }
        gold = {entity_key(kind, name): name for kind, name in item.gold}
        for bucket in (scores.setdefault(item.lang, Score()), scores["all"]):
            bucket.predicted += len(predicted)
            bucket.gold += len(gold)
            bucket.true_positives += len(predicted.keys() & gold.keys())
            bucket.false += [(k[0], n, item.text) for k, n in predicted.items() if k not in gold]
            bucket.misses += [(k[0], n, item.text) for k, n in gold.items() if k not in predicted]
    return scores
