"""Build the shipped first-name list (`src/memoryd/extraction/data/first_names.txt`) reproducibly.

One name per line, capitalised ("Caroline"), sorted. The extractor takes a capitalised word
on this list for a low-confidence `person` (see `patterns.scan_first_names`).

Source (build-time only, not a runtime dependency of memoryd): the US 1990 census first-name
files shipped by the `names` package (`dist.male.first`, `dist.female.first`: name, percent of
men or women, cumulative percent, rank). A name is taken when it covers at least
`MIN_PERCENT` of men or of women (all 1,219 male names of the file and 2,130 female ones).

Dropped, in this order (counts are logged):

1. names the lexicon or the place gazetteer already holds as a surface, whatever the case
   ("Jordan", "Austin", "Paris", "Ruby", "Cassandra"): they stay what those files say
   (a place that is also a first name needs a locative cue there, see `places.jsonl`);
2. words the extractor already reads otherwise: days, months and holidays ("May", "June",
   "April"), and words that open a capitalised phrase or a chat turn ("Will", "Ok"): the
   pattern tables `CALENDAR_WORDS`, `TITLE_STOPWORDS` and `INTERJECTIONS`;
3. everyday English: the lower-case word is in the shipped `common_words.txt` (the 5,000 most
   frequent words), Webster's Second (`english-words`' `web2`) lists it as a lower-case
   headword, and wordfreq says it is at least ten times more frequent than the name alone
   would make it. The name's own share is estimated from the census: across names that are
   no English word, wordfreq's Zipf value is about `NAME_ZIPF_OFFSET + log10(percent)`
   (John: 3.27% of people -> 5.4). So "hope" (Zipf 5.4, the name 0.03%) is a word, while
   "mark" (5.05 vs 0.94%: 4.7 expected) and "maria" are names. Frequency alone cannot decide:
   "john" and "maria" are as frequent as "hope". Nicknames that the census under-counts
   (`KEEP`: Sam, Tom, Mike ...) are kept by hand;
4. `DENYLIST`: hand-checked words that are capitalised for another reason (Christian,
   Roman, Jesus, Santa), that are no names in prose (Numbers, Miles), or that coding text
   means as software (Julia, Hugo, Jasmine, Travis, Devin).

Usage:

    pip install --target /tmp/namedeps names==0.3.0 wordfreq==3.1.1 english-words==2.0.2
    PYTHONPATH=/tmp/namedeps .venv/bin/python scripts/build_first_names.py
"""

from __future__ import annotations

import logging
import math
import sys
from collections import Counter
from pathlib import Path

from buildkit import (
    build_module,
    census_percents,
    data_surfaces,
    everyday_words,
    start_build,
    words,
)

from memoryd.extraction.patterns import CALENDAR_WORDS, INTERJECTIONS, TITLE_STOPWORDS

log = logging.getLogger("build_first_names")

MIN_PERCENT = 0.003
"""Census frequency (percent of men or of women) at or above which a first name is taken."""
NAME_ZIPF_OFFSET = 4.75
"""wordfreq Zipf of a name that is no English word, minus log10 of its census percent (of all
people): the median over the 150 such names above 0.1%, rounded."""
WORD_SURPLUS = 1.0
"""A name whose word is 10**WORD_SURPLUS times more frequent than the name predicts is a word."""


KEEP = words(
    "Sam Tom Ben Mike Dan Nick Bob Josh Luke Ted Ross Morgan Clark Graham Perry Drew Lewis "
    "Nelson Carter Parker Walker"
)
"""Short forms and surnames-as-names that the census under-counts (it records "Samuel", not
"Sam"), so their word sense looks larger than it is; capitalised mid-sentence they are names."""
DENYLIST = words(
    "Christian Roman Jesus Santa Numbers Miles Asia Carolina Del "
    "Ada Julia Crystal Hugo Jasmine Luigi Travis Devin Cody Alexa Mercedes"
)
"""Census first names that prose capitalises as something else: a religion or nationality
adjective, a holy or holiday name, the plural "miles", the continent, half of "North
Carolina", the Spanish "del"; and names that coding sessions mean as software the lexicon
lacks: the languages Ada, Julia and Crystal, Hugo (site generator), Jasmine (test framework),
Luigi (pipelines), Travis (CI), the assistants Devin, Cody and Alexa, and the car."""


def census_names() -> dict[str, float]:
    """Name (capitalised) -> percent of all people, for names common among men or women."""
    return {
        name: (men + women) / 2
        for name, (men, women) in census_percents().items()
        if max(men, women) >= MIN_PERCENT
    }


def word_surplus(name: str, percent: float) -> float:
    """log10 of how much more frequent the word is than the name alone would make it."""
    zipf = float(build_module("wordfreq").zipf_frequency(name.lower(), "en"))
    return zipf - (NAME_ZIPF_OFFSET + math.log10(percent))


def build(out: Path) -> tuple[list[str], Counter[str], dict[str, list[str]]]:
    names = census_names()
    taken = data_surfaces(out / "lexicon.jsonl", out / "places.jsonl")
    everyday = everyday_words(out / "common_words.txt")
    pattern_words = CALENDAR_WORDS | TITLE_STOPWORDS | INTERJECTIONS
    dropped: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    kept: list[str] = []
    for name, percent in sorted(names.items(), key=lambda item: (-item[1], item[0])):
        lower = name.lower()
        if name.casefold() in taken:
            reason = "lexicon or place"
        elif name in pattern_words:
            reason = "calendar or opener word"
        elif name not in KEEP and lower in everyday and word_surplus(name, percent) >= WORD_SURPLUS:
            reason = "everyday word"
        elif name in DENYLIST:
            reason = "denylist"
        else:
            kept.append(name)
            continue
        dropped[reason] += 1
        examples.setdefault(reason, []).append(name)
    return sorted(kept), dropped, examples


def main(argv: list[str] | None = None) -> int:
    run = start_build(__doc__, argv, ("names", "wordfreq", "english-words"))
    if run is None:
        return 2
    kept, dropped, examples = build(run.out)
    (run.out / "first_names.txt").write_text("\n".join(kept) + "\n", encoding="utf-8")
    log.info("sources: %s", run.versions)
    log.info("census names >= %s%%: %d", MIN_PERCENT, len(kept) + sum(dropped.values()))
    log.info("wrote %d names to %s", len(kept), run.out / "first_names.txt")
    for reason, count in dropped.most_common():
        log.info("dropped %d (%s): %s", count, reason, " ".join(examples[reason]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
