"""Build the shipped everyday-noun list (`src/memoryd/extraction/data/everyday_nouns.txt`).

One lower-case English noun per line, sorted. The extractor reads a capitalised phrase that
ends in one ("German Shepherd", "Chicken Pot Pie", "Financial Analyst", "Pride Parade") as no
person unless it opens with a known first name ("Harry Potter", "Tim Cook"); see
`patterns._classify_phrase`.

Source (build time only, not a dependency of memoryd): Princeton WordNet 3.0's noun database
(`data.noun`) as Debian's `wordnet-base` package installs it under /usr/share/wordnet (or
unpacked from `apt-get download wordnet-base`). Taken: every single-word noun lemma written
in lower case there (proper nouns are capitalised in WordNet, so "jones" and "chen" are not
taken while "potter" and "cook" are), letters only, at least three long.

Usage:

    apt-get download wordnet-base && dpkg-deb -x wordnet-base_*.deb /tmp/wn
    .venv/bin/python scripts/build_everyday_nouns.py --wordnet /tmp/wn/usr/share/wordnet
"""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path

from buildkit import DATA_DIR

log = logging.getLogger("build_everyday_nouns")

_LEMMA = re.compile(r"[a-z]{3,}")


def everyday_nouns(data_noun: Path) -> list[str]:
    """The lower-case single-word noun lemmas of a WordNet `data.noun` file, sorted.

    A data line is `offset lex_filenum ss_type w_cnt word lex_id [word lex_id ...] ...`
    (wndb(5)); `w_cnt` is hexadecimal, and an adjective marker like `(a)` may follow a word.
    Lines starting with spaces are the licence header."""
    nouns: set[str] = set()
    for line in data_noun.read_text(encoding="latin-1").splitlines():
        if not line or line.startswith(" "):
            continue
        fields = line.split(" ")
        for i in range(int(fields[3], 16)):
            lemma = re.sub(r"\(.*\)$", "", fields[4 + 2 * i])
            if _LEMMA.fullmatch(lemma):
                nouns.add(lemma)
    return sorted(nouns)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument("--out", type=Path, default=DATA_DIR / "everyday_nouns.txt")
    args = parser.parse_args()
    data_noun = args.wordnet / "data.noun"
    if not data_noun.is_file():
        parser.error(f"{data_noun} not found: install or unpack Debian's wordnet-base")
    nouns = everyday_nouns(data_noun)
    args.out.write_text("".join(f"{noun}\n" for noun in nouns), encoding="utf-8")
    log.info("wrote %d nouns to %s", len(nouns), args.out)


if __name__ == "__main__":
    main()
