"""What the data build scripts share (build time only, never imported by memoryd): their
build-time packages, the census first names, the surfaces the shipped data already claims,
and the everyday-word test."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import logging
import re
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class WordNetNouns:
    """Princeton WordNet 3.0's noun database as Debian's `wordnet-base` installs it (wndb(5)).

    A `data.noun` line is `offset lex_filenum ss_type w_cnt word lex_id [word lex_id ...]
    p_cnt [pointer_symbol offset pos source/target ...] | gloss`, counts of words in hex;
    an `index.noun` line lists a lemma's synsets, the most frequent sense first. Lines
    opening with spaces are the licence header."""

    lemmas: dict[str, list[str]]
    """synset offset → its lemmas as written (lower case for common nouns)."""
    lexfile: dict[str, int]
    """synset offset → lexicographer file number (5 noun.animal, 6 noun.artifact ...)."""
    hyponyms: dict[str, list[str]]
    """synset offset → the offsets of its hyponyms and instances."""
    senses: dict[str, list[str]]
    """lemma (lower case, `_` for spaces) → its synsets, the most frequent sense first."""
    uses: dict[str, dict[str, int]] = field(default_factory=dict)
    """lemma → part of speech (`noun`, `verb`, `adj`, `adv`) → how often its senses of that
    part of speech are tagged in WordNet's sense-tagged corpora (`cntlist.rev`)."""

    @classmethod
    def read(cls, folder: Path) -> WordNetNouns:
        lemmas: dict[str, list[str]] = {}
        lexfile: dict[str, int] = {}
        hyponyms: dict[str, list[str]] = {}
        for line in (folder / "data.noun").read_text(encoding="latin-1").splitlines():
            if not line or line.startswith(" "):
                continue
            fields = line.split(" | ", 1)[0].split()
            offset, count = fields[0], int(fields[3], 16)
            lexfile[offset] = int(fields[1])
            lemmas[offset] = [re.sub(r"\(.*\)$", "", fields[4 + 2 * i]) for i in range(count)]
            at = 4 + 2 * count
            for i in range(int(fields[at])):
                symbol, target, pos = fields[at + 1 + 4 * i : at + 4 + 4 * i]
                if pos == "n" and symbol in ("~", "~i"):
                    hyponyms.setdefault(offset, []).append(target)
        senses: dict[str, list[str]] = {}
        for line in (folder / "index.noun").read_text(encoding="latin-1").splitlines():
            if not line or line.startswith(" "):
                continue
            fields = line.split()
            pointers = int(fields[3])
            senses[fields[0]] = fields[6 + pointers :]
        return cls(lemmas, lexfile, hyponyms, senses, _tagged_uses(folder / "cntlist.rev"))

    def verb_share(self, lemma: str) -> float:
        """The share of a lemma's tagged uses that are verbs ("hold" 0.98, "file" 0.77,
        "drink" 0.61, "game" 0): 0 when it is never tagged."""
        uses = self.uses.get(lemma, {})
        total = sum(uses.values())
        return uses.get("verb", 0) / total if total else 0.0

    def below(self, offset: str) -> set[str]:
        """Every synset under `offset` (hyponyms and instances, at any depth)."""
        seen: set[str] = set()
        frontier = [offset]
        while frontier:
            frontier = [h for o in frontier for h in self.hyponyms.get(o, ()) if h not in seen]
            seen.update(frontier)
        return seen


_SS_TYPES = {"1": "noun", "2": "verb", "3": "adj", "4": "adv", "5": "adj"}


def _tagged_uses(path: Path) -> dict[str, dict[str, int]]:
    """`cntlist.rev` lines are `lemma%ss_type:... sense_number tag_count`; empty when the
    file is missing (older unpacks)."""
    uses: dict[str, dict[str, int]] = {}
    if not path.is_file():
        return uses
    for line in path.read_text(encoding="latin-1").splitlines():
        fields = line.split()
        if len(fields) != 3 or "%" not in fields[0]:
            continue
        lemma, key = fields[0].split("%", 1)
        pos = _SS_TYPES.get(key[:1])
        if pos is not None:
            by_pos = uses.setdefault(lemma, {})
            by_pos[pos] = by_pos.get(pos, 0) + int(fields[2])
    return uses


@dataclass(frozen=True)
class BuildRun:
    """What a build script starts from: where the data goes, the versions of its build-time
    packages (logged, so a rebuild can use the same), and WordNet when it reads it."""

    out: Path
    versions: dict[str, str]
    wordnet: WordNetNouns | None = None


def start_build(
    doc: str | None, argv: list[str] | None, packages: tuple[str, ...], *, wordnet: bool = False
) -> BuildRun | None:
    """Parse a build script's command line (`--out DIR`, default the shipped data folder;
    `--wordnet DIR` when it reads WordNet) and check its build-time packages. None, with the
    reason logged, when a package or WordNet is missing: the script's docstring says how to
    get them."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    if wordnet:
        parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    args = parser.parse_args(argv)
    log = logging.getLogger("buildkit")
    try:
        versions = {p: importlib.metadata.version(p) for p in packages}
    except importlib.metadata.PackageNotFoundError as exc:
        log.error("missing build dependency %s: see this script's docstring", exc)
        return None
    if not wordnet:
        return BuildRun(args.out, versions)
    if not (args.wordnet / "data.noun").is_file():
        log.error("no data.noun in %s: install or unpack Debian's wordnet-base", args.wordnet)
        return None
    return BuildRun(args.out, versions, WordNetNouns.read(args.wordnet))
