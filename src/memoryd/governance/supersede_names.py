"""Names for supersede judging: the curated lexicon of tools, libraries and protocols, and
the checks that turn a slot of text into a known name, a code token or a rare word.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

CHOICE_TYPES = frozenset({"tool", "library", "concept"})
"""Entity types that can be a replaced choice (a tool, library, service, protocol); concepts
come only from the curated lexicon (protocols) or, from the graph, never."""

GRAPH_CHOICE_TYPES = frozenset({"tool", "library"})
"""Types of graph entities a rule may take as the replaced thing besides the lexicon's."""

SINGLE_VALUED_KINDS = frozenset(
    {
        "database",
        "framework",
        "runtime",
        "cloud",
        "ci",
        "package-manager",
        "bundler",
        "test-runner",
        "e2e-testing",
        "build-tool",
    }
)
"""Lexicon kinds of which a role has one current choice (a package manager, a framework, the
CI system). Linters, formatters and other development tools run side by side: a project that
adds Playwright keeps pnpm."""


# --------------------------------------------------------------------------- names


@dataclass(frozen=True)
class Name:
    """A tool, library or other named thing, with the surfaces it is written as."""

    name: str
    surfaces: tuple[str, ...]
    kind: str = ""

    @property
    def pattern(self) -> re.Pattern[str]:
        return _surface_pattern(self.surfaces)


@cache
def _surface_pattern(surfaces: tuple[str, ...]) -> re.Pattern[str]:
    alts = "|".join(re.escape(s) for s in sorted(surfaces, key=len, reverse=True))
    return re.compile(rf"(?<![\w.@/-])(?:{alts})(?![\w-]|\.\w)", re.IGNORECASE)


@cache
def _lexicon() -> dict[str, Name]:
    """Casefolded surface → Name, over the shipped lexicon's tools, frameworks and databases."""
    from memoryd.extraction.pipeline import load_lexicon

    found: dict[str, Name] = {}
    for entry in load_lexicon():
        if not entry.kind and entry.source != "curated":
            continue  # package-registry names: too many are ordinary words
        if entry.type.value not in CHOICE_TYPES:
            continue  # a company, a person or a place is not a choice a record replaces
        name = Name(entry.name, (entry.name, *entry.aliases), entry.kind)
        for surface in name.surfaces:
            found.setdefault(surface.casefold(), name)
    return found


@cache
def _case_sensitive() -> frozenset[str]:
    """Surfaces that are names only as written ("Go", "Swift"; not "go", "swift")."""
    from memoryd.extraction.pipeline import load_lexicon

    return frozenset(s for entry in load_lexicon() for s in entry.case_sensitive)


@cache
def _case_sensitive_folded() -> frozenset[str]:
    return frozenset(s.casefold() for s in _case_sensitive())


def _is_name(surface: str) -> bool:
    return surface.casefold() not in _case_sensitive_folded() or surface in _case_sensitive()


@cache
def _lexicon_pattern() -> re.Pattern[str]:
    return _surfaces_pattern(tuple(sorted(_lexicon(), key=len, reverse=True)))


def _surfaces_pattern(surfaces: tuple[str, ...]) -> re.Pattern[str]:
    alts = "|".join(re.escape(s) for s in surfaces)
    return re.compile(rf"(?<![\w.@/-])(?:{alts})(?![\w-]|\.\w)", re.IGNORECASE)


@cache
def _lexicon_starts() -> re.Pattern[str]:
    """Where a lexicon name may start: a first letter of a surface, after no word character
    (the lexicon pattern's own look-behind). The pattern tries its 600-odd surfaces at every
    place of a text; these places are one word in six."""
    firsts = "".join(sorted({surface[0] for surface in _lexicon()}))
    return re.compile(rf"(?<![\w.@/-])[{re.escape(firsts)}]", re.IGNORECASE)


@lru_cache(maxsize=1024)
def _lexicon_at(char: str) -> re.Pattern[str] | None:
    """The lexicon pattern with only the surfaces whose first letter matches `char` as the
    pattern matches it (ignoring case), in the pattern's order: at a place starting with
    `char`, it matches what the whole pattern does. None: no surface starts so."""
    surfaces = tuple(
        s
        for s in sorted(_lexicon(), key=len, reverse=True)
        if re.fullmatch(re.escape(s[0]), char, re.IGNORECASE)
    )
    return _surfaces_pattern(surfaces) if surfaces else None


def _lexicon_matches(text: str) -> list[re.Match[str]]:
    """`_lexicon_pattern().finditer(text)`, at its candidate places only (`_lexicon_starts`):
    the leftmost match from where the last one ended, as `finditer` finds it."""
    out: list[re.Match[str]] = []
    end = 0
    for start in _lexicon_starts().finditer(text):
        at = start.start()
        if at < end:
            continue
        rx = _lexicon_at(text[at])
        m = None if rx is None else rx.match(text, at)
        if m is not None:
            out.append(m)
            end = m.end()
    return out


_CJK = re.compile(r"[\u4e00-\u9fff]")


def names_in(
    text: str, known: Sequence[Name] = (), *, chinese: bool | None = None
) -> list[tuple[int, Name]]:
    """Known names in the text with their offsets, in order: the lexicon's, and `known`
    (entities of the graph both memories mention)."""
    lex = _lexicon()
    if chinese is None:
        chinese = _CJK.search(text) is not None
    found = list(_lexicon_names(text, chinese))
    for name in known:
        if name.surfaces[0].casefold() in lex:
            continue
        found += [(m.start(), name) for m in name.pattern.finditer(text)]
    return sorted(found, key=lambda item: item[0])


@lru_cache(maxsize=16384)
def _lexicon_names(text: str, chinese: bool) -> tuple[tuple[int, Name], ...]:
    """The lexicon's names in a text, matched once per text: judging reads the same slots,
    titles and sentences for each of a newer memory's twenty pairs."""
    lex = _lexicon()
    # Case tells "Black" the formatter from "black" the colour in English; in Chinese text a
    # Latin word is a name however it is written ("格式化工具用 black").
    return tuple(
        (m.start(), lex[m.group(0).casefold()])
        for m in _lexicon_matches(text)
        if chinese or _is_name(m.group(0))
    )


def name_of(
    slot: str, known: Sequence[Name] = (), *, within: int = 12, context: str = "", code: bool = True
) -> Name | None:
    """The thing a captured slot names: a lexicon name or a known entity at its start
    (within `within` characters), else a code-like name opening it (`code_name`). Any
    other word ("be", "to", "need", a person) names nothing a memory could replace.
    `context`: the sentence the slot is from; `code`: whether a code-like name counts."""
    slot = slot.strip().removeprefix("the ").removeprefix("The ").strip()
    found = names_in(slot[:60], known, chinese=_CJK.search(context or slot) is not None)
    if found and found[0][0] <= within:
        return found[0][1]
    return code_name(_FILLER.sub("", slot)) if code else None


_CODE_TOKEN = re.compile(
    r"`(?P<tick>[A-Za-z][\w.+#-]{1,39})`|(?P<word>[A-Za-z][\w.+#-]{1,39})(?![/\w])"
)
_CODE_SHAPE = re.compile(
    r"^(?:[a-z]+[A-Z][A-Za-z]*|[A-Z][a-z]+[A-Z][A-Za-z]*|[A-Za-z]+\.(?:js|ts|py|rs|go|io|net)"
    r"|[A-Za-z]+\d+[A-Za-z\d]*)$"
)
"""Names written as code: camel case (MobX, GraphQL), a language extension (Chart.js), letters
with digits (log4j)."""
_INFLECTION = re.compile(r"(?:ies|es|s|ed|ing|er|ers|ly)$")


def code_name(slot: str) -> Name | None:
    """The code-like name opening a slot when memoryd does not know it: in backticks, shaped
    as code (`_CODE_SHAPE`), or a word that is no English word, first name or inflection of
    one ("gofmt", "argparse"). Function words, verbs and people never are."""
    m = _CODE_TOKEN.match(slot.strip())
    if m is None:
        return None
    if m.group("tick"):
        text = m.group("tick").strip("()")
    else:
        text = m.group("word").rstrip(".-")
        if not (_CODE_SHAPE.match(text) or _not_a_word(text)):
            return None
    if len(text) < 3 or not re.search(r"[A-Za-z]", text):
        return None
    return Name(text, (text,), CODE_KIND)


CODE_KIND = "code"
"""The kind of a name memoryd knows only by its shape (`code_name`, `word_name`)."""
_VALUE_BEFORE = re.compile(
    r"\b(?:on|with|is|are|was|were|use|uses|used|using|via|chose|chosen|picked|prefer|"
    r"prefers|adopted|decided on)\s+(?:the\s+|plain\s+|`)?$",
    re.IGNORECASE,
)


def states_value(text: str, name: Name) -> bool:
    """The text states `name` as the value of a choice ("decided on MobX", "the client is
    requests", "built with argparse"), not as a word in passing ("manual codebase
    searching"): what a name known only by its shape needs in the older memory."""
    return any(
        _VALUE_BEFORE.search(text[max(0, m.start() - 30) : m.start()])
        for m in name.pattern.finditer(text)
    )


def _not_a_word(text: str) -> bool:
    """A lower-case word of three letters or more that no English word list holds, however
    it is inflected, and no first name: a tool's name (`gofmt`), not prose."""
    from memoryd.extraction.pipeline import load_first_names

    if not re.fullmatch(r"[a-z][a-z0-9-]{3,30}", text):
        return False
    words = _english()
    stems = {text, _INFLECTION.sub("", text), re.sub(r"(?:es|s|ed|d)$", "", text)}
    stems |= {s + "e" for s in tuple(stems)}
    if stems & words or any(part in words for part in text.split("-")):
        return False
    return text.capitalize() not in load_first_names()


@cache
def _english() -> frozenset[str]:
    from memoryd.extraction.pipeline import load_everyday_nouns
    from memoryd.extraction.wordlists import load_common_words

    return load_common_words() | load_everyday_nouns()


def word_name(slot: str) -> Name | None:
    """The rarer word opening the replaced side of "use httpx instead of requests", taken
    as a name only when the other side is one: a lower-case word of four letters or more
    outside the commonest English words (`RARE_FROM` on)."""
    from memoryd.extraction.wordlists import load_common_words_ranked

    m = re.match(r"\s*([a-z][a-z0-9]{3,30})(?![/\w-])", _FILLER.sub("", slot))
    if m is None:
        return None
    rank = load_common_words_ranked().get(m.group(1))
    if rank is not None and rank < RARE_FROM:
        return None
    return Name(m.group(1), (m.group(1),), CODE_KIND)


RARE_FROM = 2000
"""Words ranked below this in `common_words.txt` (ordered by frequency) are never names."""


_NEW_END = re.compile(
    r"\s+(?:for|in|on|at|because|since|as|so|to|and|but|which|that|when|after|before|"
    r"across|with|via|from|now)\b|[,;:!?()\[\]，。；：！？、（）]|\.(?!\w)|的|来|做|作为|因为|后|了",
    re.IGNORECASE,
)
_NEW_WORD = re.compile(r"[A-Za-z][\w.+#-]*(?:\s+[A-Z][\w.+#-]*){0,2}|[\u4e00-\u9fff]{2,6}")


def new_of(slot: str, known: Sequence[Name] = (), *, context: str = "") -> Name | None:
    """What a change moves to: a known name, else the first words of the slot. Only the
    new side may be a name memoryd does not know ("replaced Celery with Dramatiq"): the
    replaced side is what an older memory is matched on, and must be a known name."""
    found = name_of(slot, known, context=context)
    if found is not None:
        return found
    slot = slot.strip().removeprefix("the ").removeprefix("The ").strip()
    cut = _NEW_END.search(slot)
    word = _NEW_WORD.match((slot[: cut.start()] if cut else slot).strip())
    if word is None:
        return None
    text = word.group(0).strip()
    return Name(text, (text,))


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_FILLER = _rx(r"^\s*(?:(?:the|our|plain|any|all|using|use|to use|of)\s+)+")
