"""Names that are also everyday words ("api", "Rust", "Mark"): whether a surface is generic
(`generic_word`) and the evidence that a match of one is meant as a name (a version or a
cue after it, not inside an identifier or a code fence's label, not opening a clause
without a comma or `'s`). Read by `extraction.pipeline` and `extraction.linking`.
"""

from __future__ import annotations

import re
from collections.abc import Set

from memoryd.extraction.patterns import _opens_clause, _words

# --- names that are also everyday words -------------------------------------------------------

GENERIC_TECH_WORDS = _words(
    """
    api apis app apps backend frontend server servers client clients cluster clusters node
    nodes pod pods container containers service services worker workers daemon dev devel prod
    production staging local localhost test tests testing build builds config configs
    configuration settings lockfile lock locks file files flow flows cache db database
    databases proxy gateway queue queues job jobs cron script scripts module modules package
    packages lib libs library core common util utils helper helpers web site docs doc admin auth
    user users data model models schema index search store storage router routes route host
    hosts port ports env environment deploy deployment release releases bundle bundler
    compiler runtime plugin plugins middleware handler handlers hook hooks event events stream
    streams task tasks pipeline pipelines repo repos branch main master upstream origin remote
    debug log logs logger logging metrics monitor monitoring dashboard cli sdk ui ux frontend
    mobile desktop infra network networking storage bucket buckets volume volumes image images
    """
)
"""Developer words that name a role or a thing every project has ("the api", "local dev",
"the lockfile", "the cluster"), never one library or tool: a lower-case name spelt like one
needs evidence that it is used as a name."""
_VERSION_AFTER_RE = re.compile(r"[ \t]*(?:@|==|>=|~=|\^|[ \t]v)?[ \t]*\d+(?:\.\d+)+")
_CUE_AFTER_RE = re.compile(
    r"[ \t]+(?:library|libraries|package|packages|module|crate|gem|plugin|sdk|SDK|framework)\b"
)
_AUXILIARY_AFTER_RE = re.compile(
    r"[ \t]+(?:is|was|are|were|has|had|does|did|will|would|can|could|should|must|may|might"
    r"|needs|keeps|stays|remains)\b"
)
_POSSESSIVE_AFTER_RE = re.compile(r"['’]s\b|,|[ \t]*[\u3400-\u4dbf\u4e00-\u9fff]")


def generic_word(surface: str, common_words: Set[str], *, compounds: bool = True) -> bool:
    """Whether a lower-case surface is everyday English or developer jargon: a common word, a
    word of `GENERIC_TECH_WORDS`, or (with `compounds`) a compound of two or more common
    words written as one (`lockfile`, `filelock`) or hyphenated (`source-map`). Compounds
    count against registry names only: a project the user named `webshop` is a name."""
    if surface != surface.lower() or not surface.isascii():
        return False
    word = surface.lower()
    if word in common_words or word in GENERIC_TECH_WORDS:
        return True
    if not compounds:
        return False
    parts = [p for p in re.split(r"[-_]", word) if p]
    if len(parts) > 1:
        return all(p in common_words or p in GENERIC_TECH_WORDS for p in parts)
    return word.isalpha() and _compound(word, common_words)


def _compound(word: str, common_words: Set[str]) -> bool:
    """`word` split into two or more common words of three letters or more."""
    if len(word) < 6:
        return False
    for cut in range(3, len(word) - 2):
        head, tail = word[:cut], word[cut:]
        if head in common_words and (tail in common_words or _compound(tail, common_words)):
            return True
    return False


def in_identifier(text: str, start: int, end: int) -> bool:
    """Whether `text[start:end]` is one part of a lower-case hyphenated or underscored
    identifier (`date-fns` in `date-fns-tz`, `ubuntu` in `ubuntu-latest`, `lockfile` in
    `--frozen-lockfile`, `api` in `ecommerce-api`); a capitalised name in a prose compound
    ("React-based", "non-Redis") stays a name."""
    if text[start:end] != text[start:end].lower():
        return False
    before = text[start - 1] if start else ""
    after = text[end : end + 2]
    joined_before = before in ("-", "_")
    joined_after = len(after) == 2 and after[0] in ("-", "_") and (after[1].isalnum())
    return joined_before or joined_after


def name_evidence(text: str, start: int, end: int) -> bool:
    """Whether the words around a surface show it is used as a name: it is the whole of an
    inline code span (`` `structlog` ``), a version follows it ("lockfile 0.12", "react@18"),
    or a word such as "library" or "package" does."""
    if text[start - 1 : start] == "`" and text[end : end + 1] == "`":
        return True
    return bool(_VERSION_AFTER_RE.match(text, end) or _CUE_AFTER_RE.match(text, end))


def clause_start_evidence(text: str, start: int, end: int) -> bool:
    """Whether a name opening a clause ("Black is the formatter", "Rust 写解析器") reads as
    the name rather than the everyday word ("Solid flow.", "Click the button", "Go ahead"): a
    verb such as "is" or "was", a comma, `'s` or Chinese text follows it, or `name_evidence`."""
    return bool(
        name_evidence(text, start, end)
        or _AUXILIARY_AFTER_RE.match(text, end)
        or _POSSESSIVE_AFTER_RE.match(text, end)
    )


def opens_clause(text: str, start: int, sentence_starts: Set[int]) -> bool:
    """Whether the word at `start` is capitalised by position (see `_opens_clause`)."""
    return _opens_clause(text, start, sentence_starts)


def fence_label(text: str, start: int) -> bool:
    """Whether the word at `start` is a code fence's language label (```` ```bash ````)."""
    return text.startswith("```", max(0, start - 3)) and start >= 3
