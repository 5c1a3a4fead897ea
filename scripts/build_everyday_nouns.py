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

import logging
import re
import sys

from buildkit import WordNetNouns, start_build

log = logging.getLogger("build_everyday_nouns")

_LEMMA = re.compile(r"[a-z]{3,}")


def everyday_nouns(wordnet: WordNetNouns) -> list[str]:
    """WordNet's lower-case single-word noun lemmas, letters only, sorted."""
    return sorted({w for ws in wordnet.lemmas.values() for w in ws if _LEMMA.fullmatch(w)})


def main(argv: list[str] | None = None) -> int:
    run = start_build(__doc__, argv, (), wordnet=True)
    if run is None or run.wordnet is None:
        return 2
    nouns = everyday_nouns(run.wordnet)
    out = run.out / "everyday_nouns.txt"
    out.write_text("".join(f"{noun}\n" for noun in nouns), encoding="utf-8")
    log.info("wrote %d nouns to %s", len(nouns), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
