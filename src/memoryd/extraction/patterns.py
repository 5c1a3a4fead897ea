"""Regexes and rule tables for the pattern stage (seeds/003), in pure Python.

What becomes an entity, and why:

* URLs become a `concept` named by host and path (a GitHub/GitLab repository URL becomes a
  `project` `owner/repo`) so the memory can `cites` it; query strings and fragments are dropped.
  A host that is not public (`http://api`, `http://db:5432`, localhost, an IP) names nothing.
* Package managers in install commands (`bun install`, `pip install x`) are the `tool`s they
  are, when the lexicon knows them; an install command ends at its line.
* `RFC 9110` and `PEP 8` become `concept`s, cited as well.
* `@handle` becomes a `person` (decorators such as `@property` are skipped).
* Names in 「」 or 【】 become a `concept` (a `project` when they end in 项目, 系统, 平台 …).
* npm scoped packages (`@babel/core`) become a `library`; packages named by install commands
  and import statements (`pip install httpx`, `from pydantic import`, `require('zod')`) become a
  `library` (a `tool` for `brew`/`apt`), even when the lexicon left them out as common words.
* Cloud regions (`us-east-1`) become a `place`.
* CamelCase identifiers become low-confidence `concept`s; capitalised multi-word phrases become
  low-confidence `person`/`organization`/`project`/`place` candidates, and only when they are
  not made of everyday words ("Code Review" is not a name). Chat openers are not part of a
  name ("Hey Caroline" is Caroline, who alone is no phrase), and a phrase with a day or month
  ("Last Fri") or in quotes ("Becoming Nicole", a book) is never a person.
* A capitalised word on the shipped first-name list (`data/first_names.txt`) is a
  low-confidence `person` ("ask Alice", "my son Kyle"), unless it is one word of a longer
  capitalised name, addresses someone ("Hey Caroline", "Thanks, Mel!"), opens a line as a
  speaker label ("Maria: ..."), or sits in code. At the
  start of a sentence (or after a colon or an opening quote) it needs a comma or `'s` after
  it, or the same name in mid-sentence elsewhere in the text: "Mark the test as flaky" is a
  verb, "Mark, can you ..." and "Mark's PR" are Mark.
* File paths and dotted module paths are NOT entities: a coding session touches hundreds of
  files, and one node per file would drown the graph. They are reported in `Extraction.notes`,
  they shield their inside from other matches (`src/react/app.ts` does not mention React), and a
  module path credits its root package when that package is known (`spacy.pipeline` → spaCy).

Packages named by install commands and imports are `extraction.code_context`; whether a
name that is also an everyday word is meant as a name, `extraction.generic_names`.

Over 600 lines: one rule table per entity kind, each with the regexes and exceptions it was
measured with; splitting them would scatter one measured set.
"""

from __future__ import annotations

import builtins
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence, Set
from dataclasses import dataclass, field
from functools import partial

from memoryd.models import EntityType

CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_RE = re.compile(f"[{CJK_CHARS}]")


def has_cjk(text: str) -> bool:
    return CJK_RE.search(text) is not None


def _words(text: str) -> frozenset[str]:
    """A word list written as whitespace-separated text, for tables that read like prose."""
    return frozenset(text.split())


# --- confidences -----------------------------------------------------------------------------

KNOWN_CONFIDENCE = 0.95
KNOWN_COMMON_WORD_CONFIDENCE = 0.6
"""A known entity named by an everyday word ("memory") may be just the word."""
CURATED_CONFIDENCE = 0.9
REGISTRY_CONFIDENCE = 0.75
AMBIGUOUS_SENTENCE_START_CONFIDENCE = 0.6
"""A case-sensitive everyday word ("Solid", "Rust") opening a sentence may be just the word."""
CODE_CONTEXT_CONFIDENCE = 0.85
URL_CONFIDENCE = 0.6
CITATION_CONFIDENCE = 0.8
MENTION_CONFIDENCE = 0.7
BRACKET_CONFIDENCE = 0.7
LENTICULAR_CONFIDENCE = 0.6
"""【】 is also used for labels such as 【注意】, so it is trusted a little less than 「」."""
SCOPED_PACKAGE_CONFIDENCE = 0.7
REGION_CONFIDENCE = 0.7
MODULE_ROOT_CONFIDENCE = 0.7
CAMEL_CONFIDENCE = 0.4
ORG_PHRASE_CONFIDENCE = 0.5
PROJECT_PHRASE_CONFIDENCE = 0.45
PERSON_PHRASE_CONFIDENCE = 0.4
CONCEPT_PHRASE_CONFIDENCE = 0.4
PLACE_PHRASE_CONFIDENCE = 0.4
FIRST_NAME_CONFIDENCE = 0.4
"""A lone first name ("Kyle"): as weak as a capitalised two-word name."""


@dataclass(frozen=True)
class PatternHit:
    """An entity candidate found by shape; `priority` orders overlapping candidates (low wins)."""

    start: int
    end: int
    name: str
    type: EntityType
    confidence: float
    kind: str
    priority: int
    aliases: tuple[str, ...] = ()


@dataclass
class PatternScan:
    """Everything the pattern stage found in one text."""

    hits: list[PatternHit] = field(default_factory=list)
    shields: list[tuple[int, int]] = field(default_factory=list)
    """Regions (URLs, e-mails, paths) whose inside no other stage may claim."""
    files: list[tuple[int, int, str]] = field(default_factory=list)
    modules: list[tuple[int, int, str]] = field(default_factory=list)
    cited: list[tuple[int, int]] = field(default_factory=list)


# Priorities: known 0, code context 1, lexicon 2, these shapes 3, NER 4, weak shapes 5.
PRIORITY_CODE = 1
PRIORITY_SHAPE = 3
PRIORITY_WEAK = 5

# --- sentences -------------------------------------------------------------------------------

_SENTENCE_END_RE = re.compile(
    r"[。！？；!?]+[」』”’\"')]*"
    r"|(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)(?<!\bcf)(?<!\bMr)(?<!\bDr)\.(?=\s|$)"
    r"|\n\s*\n"
)
_SENTENCE_END_AT_RE = re.compile(r"[。！？；!?.\n]")
"""Where a `_SENTENCE_END_RE` match can begin: its lookbehinds, tried at every position of
a text, cost more than the rest of `split_sentences`."""
_LINE_START_RE = re.compile(r"\n(?=[ \t]*(?:[-*+>#|]|\d+[.)]\s|```|$))")
_LEADING_RE = re.compile(r"[\s\"'“‘「『(\[*_>#-]*")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans, split on 。！？!? and on a period followed by space (not inside
    `store.py` or `e.g` as spaCy's sentencizer over jieba tokens would), on blank lines and
    before list items, quotes and headings. Hard-wrapped paragraph lines stay one sentence."""
    cuts = {0, len(text)}
    end = 0  # what `_SENTENCE_END_RE.finditer` finds, tried only where a match can begin
    for at in _SENTENCE_END_AT_RE.finditer(text):
        match = None if at.start() < end else _SENTENCE_END_RE.match(text, at.start())
        if match is not None:
            end = match.end()
            cuts.add(end)
    for match in _LINE_START_RE.finditer(text):
        cuts.add(match.start() + 1)
    spans: list[tuple[int, int]] = []
    ordered = sorted(cuts)
    for start, end in itertools.pairwise(ordered):
        lead = _LEADING_RE.match(text, start, end)
        real_start = lead.end() if lead else start
        real_end = end
        while real_end > real_start and text[real_end - 1].isspace():
            real_end -= 1
        if real_end > real_start:
            spans.append((real_start, real_end))
    return spans


# --- shields: URLs, e-mails, paths -----------------------------------------------------------

URL_RE = re.compile(r"\bhttps?://[^\s<>\"'`)\]}，。、；！？「」【】（）]+")
EMAIL_RE = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
FILE_EXTENSIONS = (
    "py|pyi|ipynb|ts|tsx|js|jsx|mjs|cjs|json|jsonl|toml|yaml|yml|md|mdx|rst|txt|cfg|ini|env|"
    "lock|rs|go|java|kt|kts|rb|php|c|h|cc|cpp|hpp|cs|swift|m|sh|bash|zsh|fish|ps1|sql|html|htm|"
    "css|scss|sass|less|vue|svelte|astro|xml|csv|tsv|parquet|proto|graphql|gql|tf|hcl|lua|dart|"
    "ex|exs|erl|zig|nim|ml|scala|clj|r|jl|pdf|png|jpg|jpeg|gif|svg|log|conf|service|kuzu|db|"
    "sqlite|wasm|patch|diff"
)
FILE_PATH_RE = re.compile(
    r"(?<![\w/.@:~-])(?:"
    # absolute, home- or dot-relative paths
    r"(?:~|\.{1,2})?/(?:[\w@+.-]+/)*[\w@+.-]*\w"
    # relative paths with two or more slashes, or ending in a file extension
    r"|(?:[\w@+.-]+/){2,}[\w@+.-]*\w"
    rf"|(?:[\w@+.-]+/)+[\w+.-]*\.(?:{FILE_EXTENSIONS})"
    # bare file names with a known extension
    rf"|[\w-][\w.-]*\.(?:{FILE_EXTENSIONS})"
    r")(?![\w/])",
    re.IGNORECASE,
)
TLDS = _words(
    "com org net io dev ai app cn co uk de jp fr edu gov info me sh so xyz cloud tech us eu ru "
    "in br ca au nl se ch it es pl kr tw hk sg"
)
MODULE_PATH_RE = re.compile(
    r"(?<![\w./@:-])(?P<mod>[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+\.[A-Za-z_]\w*)(?![\w/-])"
)

# --- entity shapes ---------------------------------------------------------------------------

SCOPED_PACKAGE_RE = re.compile(r"(?<![\w@/])@[a-z0-9][\w.-]*/[a-z0-9][\w.-]*[\w]")
MENTION_RE = re.compile(r"(?<![\w@./:+-])@(?P<handle>[A-Za-z][A-Za-z0-9_-]{1,38})(?![\w@/-])")
DECORATOR_NAMES = _words(
    """
    property staticmethod classmethod dataclass dataclasses abstractmethod abc override overload
    cached_property lru_cache cache wraps contextmanager asynccontextmanager total_ordering
    singledispatch singledispatchmethod final runtime_checkable typing functools pytest fixture
    validator root_validator field_validator model_validator computed_field field_serializer app
    router mcp tool task shared_task login_required csrf_exempt api_view receiver register
    command group click jit njit everyone here channel all param returns return see since
    deprecated types Component Injectable Input Output NgModule Test Override Autowired Bean
    Entity Table Column Id Get Post Put Delete Patch Controller RestController Service
    Repository Module Prop State Watch Emit Options mention mentions user username handle
    someone me you todo example
    """
)
PYTHON_BUILTINS = frozenset(dir(builtins))
CAMEL_RE = re.compile(r"(?<![\w.@/])[A-Z][a-z]+(?:[A-Z][a-z0-9]+)+(?![\w@])")
BRACKET_RE = re.compile(r"「(?P<corner>[^「」\n]{1,24})」|【(?P<lenticular>[^【】\n]{1,24})】")
BRACKET_LABELS = _words(
    "注意 重要 警告 提示 说明 更新 总结 备注 问题 结论 原因 背景 目标 方案 待办 决定 决策 "
    "TODO NOTE WARNING TIP INFO FIXME"
)
PROJECT_SUFFIXES_ZH = ("项目", "工程", "仓库", "系统", "平台", "服务")
CITATION_RE = re.compile(r"\b(?P<kind>RFC|PEP)[ -]?(?P<num>\d{1,5})\b")
REGION_RE = re.compile(
    r"\b(?:us|eu|ap|sa|ca|me|af|cn|il|mx)-(?:east|west|north|south|central|northeast|"
    r"northwest|southeast|southwest)-\d\b"
)
REPO_HOSTS = frozenset({"github.com", "gitlab.com", "bitbucket.org", "gitee.com"})
REPO_NON_OWNERS = frozenset(
    {"orgs", "topics", "features", "settings", "marketplace", "explore", "sponsors", "about"}
)

CAPITALISED_RE = re.compile(r"\b[A-Z][a-z]+(?:[ ](?:[A-Z][a-z]+|[A-Z]{2,}))+\b")
TITLE_STOPWORDS = _words(
    """
    The A An This That These Those We I You He She They It Our My Your Their Its Today
    Yesterday Tomorrow Then Also And But Or So If When While After Before Since Because Please
    Let Use Using Add Added Fix Fixed Update Updated Move Moved Switch Switched Hi Hello Thanks
    Dear Mr Mrs Ms Dr Last Next Every Each Of For With By On In To From At Via Near
    Is Are Was Were Do Does Did Has Have Had Can Could Will Would Should Might Must
    """
)
"""Words that open a capitalised phrase without being part of the name they precede."""
INTERJECTIONS = _words(
    """
    Hey Hi Hiya Hello Howdy Yo Wow Whoa Woah Yeah Yea Yes Yep Yup Yay Yah Nah No Nope Ok Okay
    Oh Ooh Ohh Ah Ahh Aw Aww Awww Haha Hah Lol Omg Woohoo Woo Hooray Hurray Yikes Ugh Hmm Um
    Uh Well Sure Thanks Thank Thx Cheers Congrats Congratulations Bye Goodbye Welcome Dear
    Morning Evening Night Sorry Hugs Love Great Awesome Cool Nice Good Right Totally Exactly
    Absolutely Definitely Indeed Same Agreed Happy Oops Alright Btw Anyway Honestly Gosh Geez
    """
)
"""Greetings and interjections ("Hey Caroline", "Wow Mel", "Congrats Caroline"): chat turns
open with them, and the name after them is not a surname."""
CALENDAR_WORDS = _words(
    """
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday Mon Tue Tues Wed Thu Thur Thurs
    Fri Sat Sun Mondays Tuesdays Wednesdays Thursdays Fridays Saturdays Sundays January
    February March April May June July August September October November December Jan Feb Mar
    Apr Jun Jul Aug Sep Sept Oct Nov Dec Christmas Easter Halloween Thanksgiving
    """
)
"""Days, months and holidays: a phrase with one ("Last Fri", "Next Monday") is a date."""
QUOTED_RE = re.compile(r"\"[^\"\n]{1,120}\"|“[^”\n]{1,120}”|(?<!\w)'[^'\n]{1,120}'(?!\w)")
"""Quoted text: a capitalised phrase inside is a title ("Becoming Nicole") or a label, not a
person."""
ORG_SUFFIXES = _words(
    """
    Inc Corp Corporation Ltd LLC GmbH Labs Lab Foundation Software Technologies Technology
    Systems Group University Institute Company Studios Consortium Association
    """
)
CONCEPT_SUFFIXES = _words(
    "Protocol Pattern Model Algorithm Format Schema Specification Standard Principle Architecture"
)
PLACE_SUFFIXES = _words(
    """
    Canyon Park Lake River Mountain Mountains Beach Island Islands Bay Valley Falls Desert
    Forest Coast Peninsula Harbor Harbour Street Avenue Boulevard Square Trail Glacier Volcano
    North South East West Northwest Northeast Southwest Southeast Midwest
    """
)
LOCATIVE_CUES = _words(
    """
    in to from at near visit visited visiting around across through toward towards outside
    inside into via throughout
    """
)
"""Words after which a place that is also a first name ("in Jordan") is taken for the place."""
PLACE_PREFIXES = _words("Lake Mount Mt Cape Fort")
"""Landmarks the gazetteer does not list ("Grand Canyon", "Lake Tahoe") are places by shape."""
PROJECT_SUFFIXES = _words(
    "Project App Engine Platform Service Server SDK API Framework Toolkit Plugin Extension "
    "CLI Bot Agent Library Dashboard Pipeline"
)

FIRST_NAME_RE = re.compile(r"(?<![\w.@/#$`\\-])[A-Z][a-z]+(?![\w@`(/\\-]|\.\w)")
"""A capitalised word that is not part of an identifier, path, attribute or call."""
_WORD_BEFORE_NAME_RE = re.compile(r"(?<![\w.])([A-Z][\w'’]*) $")
_WORD_AFTER_NAME_RE = re.compile(r" ([A-Z][\w'’]*)")
_POSSESSIVE_OR_COMMA_RE = re.compile(r"(?:['’]s\b|,)")
_CLAUSE_OPENERS = (":", "—", "–")
_OPENING_QUOTES = frozenset("\"“‘'(")
_CODE_SPAN_RE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)


def _config_value(text: str, start: int) -> bool:
    """Whether the word at `start` is the value of a `key=value` setting
    (`sso_start_url=https://…`, `role_name=AdministratorAccess`): a setting, not a name
    the text cites."""
    return start > 0 and text[start - 1] == "=" and start > 1 and text[start - 2] not in " ="


def _overlaps(start: int, end: int, regions: Iterable[tuple[int, int]]) -> bool:
    return any(start < r_end and r_start < end for r_start, r_end in regions)


def _url_entity(url: str) -> tuple[str, EntityType, str]:
    """Name, type and kind for a URL: `owner/repo` for a repository, else host + path; no
    name for a host that is not public (`http://api`, `http://db:5432`, `localhost`, an IP
    address): a container or machine name is no entity, and as one it would link every query
    holding the word ("ecommerce-api" → "api")."""
    bare = re.sub(r"^https?://", "", url)
    bare = re.split(r"[?#]", bare, maxsplit=1)[0].rstrip("/")
    parts = bare.split("/")
    host = parts[0].lower().removeprefix("www.")
    if not is_public_host(host):
        return "", EntityType.CONCEPT, "url"
    if host in REPO_HOSTS and len(parts) >= 3 and parts[1].lower() not in REPO_NON_OWNERS:
        repo = parts[2].removesuffix(".git")
        if repo:
            return f"{parts[1]}/{repo}", EntityType.PROJECT, "repository"
    return "/".join([host, *parts[1:]]), EntityType.CONCEPT, "url"


_IP_HOST_RE = re.compile(r"[\d.]+|\[[\da-f:.]*\]")


def is_public_host(host: str) -> bool:
    """Whether a URL's host (maybe with `:port` or `user@`) names a public site: it has a dot
    and is neither an IP address nor a local name (`localhost`, `*.local`, `*.internal`)."""
    name = host.rsplit("@", 1)[-1]
    if not name.startswith("["):
        name = name.split(":", 1)[0]
    name = name.rstrip(".")
    if "." not in name or _IP_HOST_RE.fullmatch(name):
        return False
    return not name.endswith((".localhost", ".local", ".internal", ".lan", ".home.arpa"))


def finditer_holding(regex: re.Pattern[str], text: str, *needed: str) -> Iterator[re.Match[str]]:
    """`regex.finditer(text)`, or nothing when the text holds none of `needed`, literals every
    match contains ("@" for an e-mail): a scan costs 4-12 us a text, a substring test less."""
    return regex.finditer(text) if any(word in text for word in needed) else iter(())


def _scan_shields(text: str, scan: PatternScan) -> None:
    for match in finditer_holding(URL_RE, text, "://"):
        url = match.group().rstrip(".,;:!?'\"")
        end = match.start() + len(url)
        scan.shields.append((match.start(), end))
        name, etype, kind = _url_entity(url)
        if name and not _config_value(text, match.start()):
            scan.hits.append(
                PatternHit(
                    match.start(), end, name, etype, URL_CONFIDENCE, kind, PRIORITY_SHAPE, (url,)
                )
            )
            scan.cited.append((match.start(), end))
    for match in finditer_holding(EMAIL_RE, text, "@"):
        if not _overlaps(match.start(), match.end(), scan.shields):
            scan.shields.append(match.span())
    for match in FILE_PATH_RE.finditer(text):
        if _overlaps(match.start(), match.end(), scan.shields):
            continue
        path = match.group()
        if len(path) < 5 or path.startswith("@"):
            continue
        scan.shields.append(match.span())
        scan.files.append((match.start(), match.end(), path))
    for match in MODULE_PATH_RE.finditer(text):
        mod = match.group("mod")
        if _overlaps(match.start(), match.end(), scan.shields):
            continue
        if mod.rsplit(".", 1)[1] in TLDS:
            continue
        scan.shields.append(match.span())
        scan.modules.append((match.start(), match.end(), mod))


def _line_rest(text: str, pos: int) -> str:
    end = text.find("\n", pos)
    return text[pos : end if end >= 0 else len(text)]


def _scan_shapes(text: str, scan: PatternScan) -> None:
    for match in finditer_holding(SCOPED_PACKAGE_RE, text, "@"):
        if not _overlaps(match.start(), match.end(), scan.shields):
            scan.hits.append(
                PatternHit(
                    *match.span(),
                    match.group(),
                    EntityType.LIBRARY,
                    SCOPED_PACKAGE_CONFIDENCE,
                    "scoped-package",
                    PRIORITY_SHAPE,
                )
            )
    for match in finditer_holding(MENTION_RE, text, "@"):
        handle = match.group("handle")
        if handle in DECORATOR_NAMES or _overlaps(match.start(), match.end(), scan.shields):
            continue
        rest = _line_rest(text, match.end())
        if re.match(r"\.\w", rest):
            continue  # an attribute such as `@app.get`
        line_start = text.rfind("\n", 0, match.start()) + 1
        if not text[line_start : match.start()].strip() and (
            not rest.strip() or rest.startswith("(")
        ):
            continue  # a decorator line such as `@cache` or `@retry(3)`
        scan.hits.append(
            PatternHit(
                *match.span(),
                handle,
                EntityType.PERSON,
                MENTION_CONFIDENCE,
                "mention",
                PRIORITY_SHAPE,
                (match.group(),),
            )
        )
    for match in BRACKET_RE.finditer(text):
        group = "corner" if match.group("corner") is not None else "lenticular"
        inner = match.group(group)
        name = inner.strip()
        if (
            not name
            or name in BRACKET_LABELS
            or re.search(r"[，。！？,.!?；;：:]", name)
            or not re.search(rf"[\w{CJK_CHARS}]", name)
            or name.isdigit()
        ):
            continue
        start = match.start(group) + inner.index(name)
        etype = EntityType.PROJECT if name.endswith(PROJECT_SUFFIXES_ZH) else EntityType.CONCEPT
        conf = BRACKET_CONFIDENCE if group == "corner" else LENTICULAR_CONFIDENCE
        scan.hits.append(
            PatternHit(start, start + len(name), name, etype, conf, "bracket", PRIORITY_SHAPE)
        )
    for match in finditer_holding(CITATION_RE, text, "RFC", "PEP"):
        if _overlaps(match.start(), match.end(), scan.shields):
            continue
        name = f"{match.group('kind')} {int(match.group('num'))}"
        scan.hits.append(
            PatternHit(
                *match.span(),
                name,
                EntityType.CONCEPT,
                CITATION_CONFIDENCE,
                "citation",
                PRIORITY_SHAPE,
            )
        )
        scan.cited.append(match.span())
    for match in REGION_RE.finditer(text):
        if not _overlaps(match.start(), match.end(), scan.shields):
            scan.hits.append(
                PatternHit(
                    *match.span(),
                    match.group(),
                    EntityType.PLACE,
                    REGION_CONFIDENCE,
                    "region",
                    PRIORITY_SHAPE,
                )
            )


def _scan_weak_shapes(
    text: str,
    scan: PatternScan,
    common_words: frozenset[str],
    first_names: frozenset[str] = frozenset(),
    sentence_starts: frozenset[int] = frozenset(),
    everyday_nouns: frozenset[str] = frozenset(),
) -> None:
    for match in CAMEL_RE.finditer(text):
        if match.group() in PYTHON_BUILTINS:
            continue  # RuntimeError, DeprecationWarning: the language's, not the project's
        if (
            len(match.group()) >= 3
            and not _overlaps(match.start(), match.end(), scan.shields)
            and not _config_value(text, match.start())
        ):
            scan.hits.append(
                PatternHit(
                    *match.span(),
                    match.group(),
                    EntityType.CONCEPT,
                    CAMEL_CONFIDENCE,
                    "camelcase",
                    PRIORITY_WEAK,
                )
            )
    heading_lines = [m.span() for m in re.finditer(r"^[ \t]*#.*$", text, re.MULTILINE)]
    quoted: list[tuple[int, int]] | None = None
    for match in CAPITALISED_RE.finditer(text):
        if _overlaps(match.start(), match.end(), scan.shields) or _overlaps(
            match.start(), match.end(), heading_lines
        ):
            continue
        if quoted is None:
            quoted = [m.span() for m in QUOTED_RE.finditer(text)]
        in_quotes = _overlaps(match.start(), match.end(), quoted)
        phrase, start = match.group(), match.start()
        opener = phrase.split(" ", 1)[0]
        if (
            opener.lower() in common_words
            and phrase[len(opener) + 1 :].split(" ", 1)[0] in first_names
            and _opens_clause(text, start, sentence_starts)
        ):
            # "Later Kyle", "Ask Alice": a word capitalised by position, then a first name
            phrase, start = phrase[len(opener) + 1 :], start + len(opener) + 1
        classify = partial(
            _classify_phrase,
            common_words=common_words,
            in_quotes=in_quotes,
            first_names=first_names,
            everyday_nouns=everyday_nouns,
        )
        hit = classify(phrase, start)
        rest = phrase[len(opener) + 1 :]
        if (
            hit is not None
            and hit.type is EntityType.PERSON
            and phrase.startswith(f"{opener} ")
            and opener.lower() in common_words
            and " " in rest
            and _opens_clause(text, start, sentence_starts)
        ):
            # "Ask Linus Torvalds": a word capitalised by position, then the person
            hit = classify(rest, start + len(opener) + 1) or hit
        if hit is not None:
            scan.hits.append(hit)


def _classify_phrase(
    phrase: str,
    start: int,
    common_words: frozenset[str],
    *,
    in_quotes: bool = False,
    first_names: frozenset[str] = frozenset(),
    everyday_nouns: frozenset[str] = frozenset(),
) -> PatternHit | None:
    """Type a capitalised phrase by its last word. A person opens with a known first name
    ("Sarah Jones", "Tim Cook") or ends in a surname that is no everyday word or noun ("Alice
    Chen" yes; "Code Review", "German Shepherd", "Financial Analyst" no), and is never a date
    ("Last Fri") or a quoted title ("Becoming Nicole")."""
    words = phrase.split(" ")
    while words and (words[0] in TITLE_STOPWORDS or words[0] in INTERJECTIONS):
        start += len(words[0]) + 1
        words = words[1:]
    if len(words) < 2:
        return None
    name = " ".join(words)
    last = words[-1]
    if last in ORG_SUFFIXES:
        return PatternHit(
            start,
            start + len(name),
            name,
            EntityType.ORGANIZATION,
            ORG_PHRASE_CONFIDENCE,
            "phrase",
            PRIORITY_WEAK,
        )
    if last in PROJECT_SUFFIXES:
        return PatternHit(
            start,
            start + len(name),
            name,
            EntityType.PROJECT,
            PROJECT_PHRASE_CONFIDENCE,
            "phrase",
            PRIORITY_WEAK,
        )
    if last in CONCEPT_SUFFIXES:
        return PatternHit(
            start,
            start + len(name),
            name,
            EntityType.CONCEPT,
            CONCEPT_PHRASE_CONFIDENCE,
            "phrase",
            PRIORITY_WEAK,
        )
    if last in PLACE_SUFFIXES or words[0] in PLACE_PREFIXES:
        return PatternHit(
            start,
            start + len(name),
            name,
            EntityType.PLACE,
            PLACE_PHRASE_CONFIDENCE,
            "phrase",
            PRIORITY_WEAK,
        )
    if (
        not in_quotes
        and not any(word in CALENDAR_WORDS for word in words)
        and len(words) <= 3
        and not last.isupper()
        and (
            words[0] in first_names
            or not any(form in common_words or form in everyday_nouns for form in noun_forms(last))
        )
    ):
        return PatternHit(
            start,
            start + len(name),
            name,
            EntityType.PERSON,
            PERSON_PHRASE_CONFIDENCE,
            "phrase",
            PRIORITY_WEAK,
        )
    return None


def noun_forms(word: str) -> tuple[str, ...]:
    """A word in lower case and, when it looks plural, its singulars ("controllers" →
    "controller"; "policies" → "policy"; "boxes" → "box"): a plural everyday noun ends no
    person's name either ("Ingress Controllers")."""
    lower = word.lower()
    forms = [lower]
    if lower.endswith("ies") and len(lower) > 4:
        forms.append(lower[:-3] + "y")
    if lower.endswith("es") and len(lower) > 3:
        forms.append(lower[:-2])
    if lower.endswith("s") and not lower.endswith("ss") and len(lower) > 3:
        forms.append(lower[:-1])
    return tuple(forms)


def scan_patterns(
    text: str,
    common_words: frozenset[str],
    *,
    first_names: frozenset[str] = frozenset(),
    sentences: Sequence[tuple[int, int]] | None = None,
    everyday_nouns: frozenset[str] = frozenset(),
) -> PatternScan:
    """Run every shape rule over `text`; candidates may overlap (the caller resolves that).

    `first_names` (capitalised, e.g. the shipped list) turns on lone first names as people;
    `sentences` are `split_sentences(text)`, computed here when not given; a capitalised
    phrase ending in one of `everyday_nouns` (lower case) is no person unless a first name
    opens it."""
    scan = PatternScan()
    _scan_shields(text, scan)
    _scan_shapes(text, scan)
    if first_names and sentences is None:
        sentences = split_sentences(text)
    starts = frozenset(start for start, _ in sentences or ())
    _scan_weak_shapes(text, scan, common_words, first_names, starts, everyday_nouns)
    if first_names:
        scan.hits += scan_first_names(
            text, first_names, sentences or (), scan.shields, common_words
        )
    return scan


def scan_first_names(
    text: str,
    first_names: frozenset[str],
    sentences: Sequence[tuple[int, int]],
    shields: Sequence[tuple[int, int]] = (),
    common_words: frozenset[str] = frozenset(),
) -> list[PatternHit]:
    """Lone capitalised first names ("ask Alice", "my son Kyle") as weak `person` hits.

    Skipped: a name next to another capitalised word that is not a chat opener or function
    word ("Amy Ellis Nutt" is the phrase rule's; "Ask Alice" is Alice), a vocative ("Hey
    Caroline", "great, John!"), a speaker label opening a line ("Maria: ..."), names in
    headings, code or paths. A name opening a
    sentence or clause counts only before a comma or `'s`, or when the same name also stands
    in mid-sentence somewhere in the text ("Mark the task as done" is no one).
    """
    starts = {start for start, _ in sentences}
    skip = [*shields, *(m.span() for m in _CODE_SPAN_RE.finditer(text))]
    skip += [m.span() for m in re.finditer(r"^[ \t]*#.*$", text, re.MULTILINE)]
    mid: set[str] = set()
    found: list[tuple[int, int, bool]] = []
    for match in FIRST_NAME_RE.finditer(text):
        if match.group() not in first_names:
            continue
        start, end = match.span()
        if _overlaps(start, end, skip) or _in_longer_name(text, start, end, common_words, starts):
            continue
        if _is_vocative(text, start, end):
            continue
        if not _opens_clause(text, start, starts):
            mid.add(match.group())
            found.append((start, end, False))
        elif not is_speaker_label(text, start, end):
            found.append((start, end, True))
    hits: list[PatternHit] = []
    for start, end, opener in found:
        name = text[start:end]
        if opener and name not in mid and not _POSSESSIVE_OR_COMMA_RE.match(text, end):
            continue
        hits.append(
            PatternHit(
                start,
                end,
                name,
                EntityType.PERSON,
                FIRST_NAME_CONFIDENCE,
                "first-name",
                PRIORITY_WEAK,
            )
        )
    return hits


_VOCATIVE_BEFORE_RE = re.compile(r"([A-Za-z]+)[ \t]*,?[ \t]*$")
_VOCATIVE_AFTER_RE = re.compile(r"[ \t]*(?:[!?.]|$)")


def _is_vocative(text: str, start: int, end: int) -> bool:
    """Whether the name addresses someone rather than mentions them: after a greeting or
    thanks ("Hey Caroline", "Thanks, Mel"), or closing a clause after a comma ("That's
    great, John!")."""
    before = _VOCATIVE_BEFORE_RE.search(text, max(0, start - 20), start)
    if before is not None and before.group(1).capitalize() in INTERJECTIONS:
        return True
    closes = _VOCATIVE_AFTER_RE.match(text, end) is not None
    return closes and text[max(0, start - 2) : start].rstrip(" \t").endswith(",")


def is_speaker_label(text: str, start: int, end: int) -> bool:
    """Whether the name at `start:end` opens a line as a transcript label ("Maria: I went
    ..."), which names who speaks rather than mentioning them."""
    return text.startswith(":", end) and not text[text.rfind("\n", 0, start) + 1 : start].strip()


def _opens_clause(text: str, start: int, sentence_starts: Set[int]) -> bool:
    """Whether the word at `start` is capitalised by position: a sentence's or line's first
    word, or the first after a colon, a dash or an opening quote or bracket."""
    if start in sentence_starts:
        return True
    line_start = text.rfind("\n", 0, start) + 1
    before = text[line_start:start].rstrip(" \t")
    if not before or before.endswith(('"', "“", "‘", "(", "[")):
        return True
    before = before.rstrip("\"'“‘([*_>#-")
    return not before or before.endswith(_CLAUSE_OPENERS)


def _in_longer_name(
    text: str, start: int, end: int, common_words: frozenset[str], sentence_starts: Set[int]
) -> bool:
    """Whether a capitalised neighbour makes the name one word of a longer one ("Amy Ellis
    Nutt", "Kyle Smith"); chat openers, function words and dates do not ("Hey Caroline",
    "Thanks Mel"), nor an everyday word capitalised only because it opens the sentence
    ("Ask Alice"), unless a quote opens there ("Becoming Nicole" is a title)."""
    before = _WORD_BEFORE_NAME_RE.search(text, max(0, start - 40), start)
    after = _WORD_AFTER_NAME_RE.match(text, end)
    for match, is_before in ((before, True), (after, False)):
        if match is None:
            continue
        word = re.sub(r"['’]s$", "", match.group(1))
        if word in TITLE_STOPWORDS or word in INTERJECTIONS or word in CALENDAR_WORDS:
            continue
        if (
            is_before
            and word.lower() in common_words
            and _opens_clause(text, match.start(1), sentence_starts)
            and text[match.start(1) - 1 : match.start(1)] not in _OPENING_QUOTES
        ):
            continue
        return True
    return False
