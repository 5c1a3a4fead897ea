"""Answer-type checking: a question asking for a typed value expects a memory holding one.

Classic question answering first reads what a question's head asks for ("what version", "which
port", "what URL") and keeps only passages holding a token of that type. A memory that talks
about PostgreSQL at length but never states a version does not answer "What PostgreSQL version
is being used?", however many of its words it holds. Recall keeps such a memory, scored lower
(`MISSING_VALUE`): the words say it is about the right thing, the missing value says it
probably does not hold the answer.

Only values a memory states in its text are checked: "when" is answered by a memory's own time
and "how many" by counting across memories, so neither is a type here.

The second check (`modified_heads`, `modified_otherwise`) reads the frame "what / which
<modifier> <head>": a session saying "provider" only as "the Credentials provider" and never
"cloud" talks about another kind of provider than "What cloud provider …" asks for
(`pipeline.answer_stage`). What the stage changes was measured: bench/RESULTS.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memoryd.recall.kinds import headed_frames
from memoryd.search.words import STOPWORDS

MISSING_VALUE = 0.5
"""The factor on a memory's score and relevance when the question asks for a typed value and
the memory holds none of that type near what the question names."""

NEAR_WORDS = 6
"""How many words before a value (and half as many after it) may hold the name it belongs to:
"Python 3.12", "postgres:16-alpine", "Redis (version 7.2)"."""

_HEAD = r"(?:what|which)\s+((?:[\w.+#-]+\s+){0,3}?)"
_OF = r"\s+of\s+(?:the\s+)?([\w.+#-]+(?:\s+[\w.+#-]+)?)"


@dataclass(frozen=True)
class ValueType:
    """A kind of value a question can ask for: the words that ask for it (the head of a
    "what / which ___" frame, or "___ of X") and the pattern a stated value matches."""

    name: str
    heads: str
    value: re.Pattern[str]

    def frames(self) -> tuple[re.Pattern[str], re.Pattern[str]]:
        return (
            re.compile(rf"\b{_HEAD}(?:{self.heads})\b(?!\s+of\b)", re.IGNORECASE),
            re.compile(rf"\b(?:what|which)\s+(?:{self.heads}){_OF}", re.IGNORECASE),
        )


VALUE_TYPES = (
    ValueType(
        "version",
        r"versions?",
        # 3.12, v3.1.0, 16.4-alpine; or a number right after a name: "Node 20", "postgres:16".
        re.compile(r"\bv?\d+(?:\.\d+)+\b|(?<=[A-Za-z][:@ ])v?\d{1,3}\b(?![.,]?\d)"),
    ),
    ValueType("port", r"ports?", re.compile(r"(?<=[:\s])\d{2,5}\b")),
    ValueType(
        "address",
        r"urls?|domains?(?:\s+names?)?|hostnames?",
        re.compile(r"\bhttps?://\S+|\b[\w-]+(?:\.[\w-]+)*\.(?:com|io|dev|app|net|org|co)\b"),
    ),
)


_FRAMES = [(kind, kind.frames()) for kind in VALUE_TYPES]


@dataclass(frozen=True)
class AskedValue:
    """What a question asks for: a value of `kind`, belonging to the things `names` says
    (the words before the head or after "of"; empty when the question names none)."""

    kind: ValueType
    names: tuple[str, ...]

    def held_in(self, text: str, analyse: Callable[[str], Iterable[str]]) -> bool:
        """Whether `text` states a value of the kind near a word naming what it belongs to
        (`NEAR_WORDS`; anywhere when the question names nothing), the words compared as
        `analyse` makes them (the index's analysis, so "PostgreSQL" meets "postgresql")."""
        wanted = set(self.names)
        for found in self.kind.value.finditer(text):
            if not wanted:
                return True
            before = text[max(0, found.start() - 16 * NEAR_WORDS) : found.start()].split()
            after = text[found.end() : found.end() + 16 * NEAR_WORDS].split()
            around = " ".join([*before[-NEAR_WORDS:], *after[: NEAR_WORDS // 2]])
            if wanted.intersection(analyse(around)):
                return True
        return False


def asked_value(query: str, analyse: Callable[[str], Iterable[str]]) -> AskedValue | None:
    """The typed value a question's head asks for, if any: "What PostgreSQL version is being
    used?" asks for a version of PostgreSQL, "Which port does the API listen on?" for a port,
    "What is the production URL?" for an address. `analyse` gives the naming words' tokens
    (stop words are left out before)."""
    for kind, (before, of) in _FRAMES:
        match = before.search(query) or of.search(query)
        if match is None:
            continue
        naming = " ".join(w for w in (match.group(1) or "").split() if w.lower() not in STOPWORDS)
        return AskedValue(kind, tuple(dict.fromkeys(analyse(naming))))
    return None


def modified_heads(
    query: str, analyse: Callable[[str], Iterable[str]]
) -> list[tuple[frozenset[str], frozenset[str]]]:
    """The (modifier tokens, head tokens) of each "what / which <modifiers> <head>" frame in
    the question (`kinds.headed_frames`): "What cloud provider is it deployed on?" asks for
    a provider of clouds. A memory holding "provider" but not "cloud" ("the Credentials
    provider", "our payment provider") talks about another kind of provider."""
    found = []
    for modifiers, head in headed_frames(query):
        mods = frozenset(analyse(" ".join(w for w in modifiers if w.lower() not in STOPWORDS)))
        heads = frozenset(analyse(head)) - mods
        if mods and heads:
            found.append((mods, heads))
    return found


_WORD = re.compile(r"[\w][\w.+#'-]*")


def modified_otherwise(
    text: str, heads: frozenset[str], analyse: Callable[[str], Iterable[str]]
) -> bool:
    """Whether every time `text` says the head it is modified by another word: "the
    Credentials provider", "a payment provider" hold "provider" as another compound; "the
    services" or "services:" hold it alone, which may be the thing asked about."""
    said = False
    words = list(_WORD.finditer(text))
    starts = tuple(head[:4] for head in heads)
    for i, word in enumerate(words):
        if not word.group().lower().startswith(starts) or not heads.intersection(
            analyse(word.group())
        ):
            continue
        said = True
        if i == 0:
            return False
        before = words[i - 1]
        gap = text[before.end() : word.start()]
        if before.group().lower() in STOPWORDS or gap.strip(" -"):
            return False
    return said
