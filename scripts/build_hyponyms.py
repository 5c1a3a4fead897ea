"""Build the shipped kinds of everyday things (`src/memoryd/extraction/data/hyponyms.jsonl`).

One JSON object per line, sorted by kind: `{"kind": "sport", "words": ["archery", ...]}`.
Recall reads it for a question that asks for instances of a kind ("What sports does John
like?", "Which board games …"): the kind's words join the query at a low weight, so "we went
surfing" answers though it never says "sport" (see `memoryd.recall.kind_expansion`).

Source (build time only, not dependencies of memoryd): Princeton WordNet 3.0's nouns as
Debian's `wordnet-base` installs them (see `build_everyday_nouns.py` to unpack it), and
wordfreq 3.1.1 for how common a word is. A kind is a noun lemma:

1. common enough to be asked about: wordfreq Zipf >= `MIN_ZIPF` (`_` read as a space);
2. whose most frequent sense is a thing one does, owns, eats, meets or suffers: an act,
   animal, artifact, event, food, person, plant or state (`KIND_LEXFILES`), so "class" (a
   grammatical category first) and abstract nouns are left out;
3. with between `MIN_WORDS` and `MAX_WORDS` common words below that sense (hyponyms and
   instances at any depth, each Zipf >= `MIN_ZIPF`, no digits): a kind with more ("food",
   "activity") is too broad to say what the question wants;
4. not mostly a verb: at most `MAX_VERB_SHARE` of its uses in WordNet's sense-tagged corpora
   (`cntlist.rev`) are verb senses. "What file holds the config?" must not read "holds" as
   the wrestling holds (cuddle, hug, nelson): "hold" is a verb in 98% of its tagged uses,
   "file" in 77%, "show" in 94%; "drink" (61%) and "dance" (63%) stay kinds;
5. not a word that names software or hardware in a coding session (`SOFTWARE_WORDS`): the
   first sense of "server" is a waiter (bunny, waitress) and of "tool" a hand tool (saw,
   hammer), which is never what "What server do we deploy to?" asks. Recall answers such
   questions from the lexicon's kinds (databases, frameworks, editors), not from WordNet.

Its words are the single-word ones among them, lower case (multi-word names would only add
their everyday parts).

Usage:

    pip install --target /tmp/buildeps wordfreq==3.1.1
    PYTHONPATH=/tmp/buildeps .venv/bin/python scripts/build_hyponyms.py \\
        --wordnet /tmp/wn/usr/share/wordnet
"""

from __future__ import annotations

import json
import logging
import sys
from functools import cache

from buildkit import WordNetNouns, build_module, start_build

log = logging.getLogger("build_hyponyms")

MIN_ZIPF = 3.0
MIN_WORDS = 2
MAX_WORDS = 300
MAX_VERB_SHARE = 0.75
SOFTWARE_WORDS = frozenset(
    {
        "server",
        "tool",
        "compiler",
        "editor",
        "driver",
        "engine",
        "machine",
        "computer",
        "platform",
        "shell",
        "terminal",
        "application",
        "program",
        "key",
        "lock",
        "bucket",
        "master",
        "printer",
        "drive",
        "flow",
        "environment",
        "helper",
        "doc",
        "service",
        "production",
        "search",
        "task",
    }
)
"""Kind words whose sense among developers is software or hardware, hand-checked against
the kinds the rules above keep (a `store` or a `job` keeps its everyday instances)."""
KIND_LEXFILES = {
    4: "noun.act",
    5: "noun.animal",
    6: "noun.artifact",
    11: "noun.event",
    13: "noun.food",
    18: "noun.person",
    20: "noun.plant",
    26: "noun.state",
}


def kinds(wordnet: WordNetNouns) -> dict[str, list[str]]:
    """kind (spaces, lower case) → its single common words below its first sense, sorted."""
    zipf_frequency = build_module("wordfreq").zipf_frequency

    @cache
    def common(word: str) -> bool:
        return bool(zipf_frequency(word.replace("_", " "), "en") >= MIN_ZIPF)

    found: dict[str, list[str]] = {}
    for lemma, synsets in wordnet.senses.items():
        first = synsets[0]
        if wordnet.lexfile[first] not in KIND_LEXFILES or not common(lemma):
            continue
        if lemma in SOFTWARE_WORDS or wordnet.verb_share(lemma) > MAX_VERB_SHARE:
            continue
        below = {
            word.lower()
            for offset in wordnet.below(first)
            for word in wordnet.lemmas[offset]
            if word.lower() != lemma and not any(c.isdigit() for c in word) and common(word.lower())
        }
        single = sorted(w for w in below if "_" not in w and "-" not in w)
        if MIN_WORDS <= len(below) <= MAX_WORDS and single:
            found[lemma.replace("_", " ")] = single
    return found


def main(argv: list[str] | None = None) -> int:
    run = start_build(__doc__, argv, ("wordfreq",), wordnet=True)
    if run is None or run.wordnet is None:
        return 2
    found = kinds(run.wordnet)
    lines = [
        json.dumps({"kind": kind, "words": words}, ensure_ascii=False)
        for kind, words in sorted(found.items())
    ]
    out = run.out / "hyponyms.jsonl"
    out.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    log.info("sources: %s", run.versions)
    log.info("wrote %d kinds (%d words) to %s", len(found), sum(map(len, found.values())), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
