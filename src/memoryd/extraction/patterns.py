"""Regexes and rule tables for the pattern stage (seeds/003), in pure Python.

What becomes an entity, and why:

* URLs become a `concept` named by host and path (a GitHub/GitLab repository URL becomes a
  `project` `owner/repo`) so the memory can `cites` it; query strings and fragments are dropped.
* `RFC 9110` and `PEP 8` become `concept`s, cited as well.
* `@handle` becomes a `person` (decorators such as `@property` are skipped).
* Names in 「」 or 【】 become a `concept` (a `project` when they end in 项目, 系统, 平台 …).
* npm scoped packages (`@babel/core`) become a `library`; packages named by install commands
  and import statements (`pip install httpx`, `from pydantic import`, `require('zod')`) become a
  `library` (a `tool` for `brew`/`apt`), even when the lexicon left them out as common words.
* Cloud regions (`us-east-1`) become a `place`.
* CamelCase identifiers become low-confidence `concept`s; capitalised multi-word phrases become
  low-confidence `person`/`organization`/`project` candidates, and only when they are not
  made of everyday words ("Code Review" is not a name).
* File paths and dotted module paths are NOT entities: a coding session touches hundreds of
  files, and one node per file would drown the graph. They are reported in `Extraction.notes`,
  they shield their inside from other matches (`src/react/app.ts` does not mention React), and a
  module path credits its root package when that package is known (`spacy.pipeline` → spaCy).
"""

from __future__ import annotations

import builtins
import itertools
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

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
_LINE_START_RE = re.compile(r"\n(?=[ \t]*(?:[-*+>#|]|\d+[.)]\s|```|$))")
_LEADING_RE = re.compile(r"[\s\"'“‘「『(\[*_>#-]*")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans, split on 。！？!? and on a period followed by space (not inside
    `store.py` or `e.g` as spaCy's sentencizer over jieba tokens would), on blank lines and
    before list items, quotes and headings. Hard-wrapped paragraph lines stay one sentence."""
    cuts = {0, len(text)}
    for match in _SENTENCE_END_RE.finditer(text):
        cuts.add(match.end())
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
    Dear Mr Mrs Ms Dr
    """
)
ORG_SUFFIXES = _words(
    """
    Inc Corp Corporation Ltd LLC GmbH Labs Lab Foundation Software Technologies Technology
    Systems Group University Institute Company Studios Consortium Association
    """
)
CONCEPT_SUFFIXES = _words(
    "Protocol Pattern Model Algorithm Format Schema Specification Standard Principle Architecture"
)
PROJECT_SUFFIXES = _words(
    "Project App Engine Platform Service Server SDK API Framework Toolkit Plugin Extension "
    "CLI Bot Agent Library Dashboard Pipeline"
)

# --- code context ------------------------------------------------------------------------------

INSTALL_RE = re.compile(
    r"\b(?P<mgr>pip3?|uv\s+pip|uv|poetry|pipx|pdm|conda|mamba|npm|pnpm|yarn|bun|npx|cargo|gem|"
    r"brew|apt-get|apt|dnf|yum|apk)\s+(?P<verb>install|add|i)\s+(?P<args>[^\n;&|`]+)"
)
TOOL_MANAGERS = frozenset({"brew", "apt-get", "apt", "dnf", "yum", "apk", "pipx"})
PACKAGE_ARG_RE = re.compile(r"(@[a-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
ARG_STOPWORDS = _words(
    """
    the a an it this that them all everything dependencies deps dependency package packages
    requirements with from in into to and or then first again locally globally now instead
    """
)
FLAGS_WITH_VALUE = frozenset(
    {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target", "-i"}
)
PY_IMPORT_RE = re.compile(
    r"^[ \t>]*(?:from\s+(?P<from>[A-Za-z_][\w.]*)\s+import\s+\S"
    r"|import\s+(?P<imp>[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)(?:\s+as\s+\w+)?[ \t]*$)",
    re.MULTILINE,
)
JS_IMPORT_RE = re.compile(
    r"(?:\bfrom\s+|\brequire\(\s*|\bimport\(\s*|^\s*import\s+)['\"](?P<pkg>(?:@[\w.-]+/)?[\w.-]+)"
    r"(?:/[\w./-]*)?['\"]",
    re.MULTILINE,
)
NODE_BUILTINS = _words(
    """
    assert buffer child_process cluster crypto dgram dns events fs http http2 https net os path
    perf_hooks process querystring readline stream string_decoder timers tls tty url util v8
    vm worker_threads zlib node
    """
)


def _overlaps(start: int, end: int, regions: Iterable[tuple[int, int]]) -> bool:
    return any(start < r_end and r_start < end for r_start, r_end in regions)


def _url_entity(url: str) -> tuple[str, EntityType, str]:
    """Name, type and kind for a URL: `owner/repo` for a repository, else host + path."""
    bare = re.sub(r"^https?://", "", url)
    bare = re.split(r"[?#]", bare, maxsplit=1)[0].rstrip("/")
    parts = bare.split("/")
    host = parts[0].lower().removeprefix("www.")
    if host in REPO_HOSTS and len(parts) >= 3 and parts[1].lower() not in REPO_NON_OWNERS:
        repo = parts[2].removesuffix(".git")
        if repo:
            return f"{parts[1]}/{repo}", EntityType.PROJECT, "repository"
    return "/".join([host, *parts[1:]]), EntityType.CONCEPT, "url"


def _scan_shields(text: str, scan: PatternScan) -> None:
    for match in URL_RE.finditer(text):
        url = match.group().rstrip(".,;:!?'\"")
        end = match.start() + len(url)
        scan.shields.append((match.start(), end))
        name, etype, kind = _url_entity(url)
        if name:
            scan.hits.append(
                PatternHit(
                    match.start(), end, name, etype, URL_CONFIDENCE, kind, PRIORITY_SHAPE, (url,)
                )
            )
            scan.cited.append((match.start(), end))
    for match in EMAIL_RE.finditer(text):
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
    for match in SCOPED_PACKAGE_RE.finditer(text):
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
    for match in MENTION_RE.finditer(text):
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
    for match in CITATION_RE.finditer(text):
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


def _scan_weak_shapes(text: str, scan: PatternScan, common_words: frozenset[str]) -> None:
    for match in CAMEL_RE.finditer(text):
        if match.group() in PYTHON_BUILTINS:
            continue  # RuntimeError, DeprecationWarning: the language's, not the project's
        if len(match.group()) >= 3 and not _overlaps(match.start(), match.end(), scan.shields):
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
    for match in CAPITALISED_RE.finditer(text):
        if _overlaps(match.start(), match.end(), scan.shields) or _overlaps(
            match.start(), match.end(), heading_lines
        ):
            continue
        hit = _classify_phrase(match.group(), match.start(), common_words)
        if hit is not None:
            scan.hits.append(hit)


def _classify_phrase(phrase: str, start: int, common_words: frozenset[str]) -> PatternHit | None:
    """Type a capitalised phrase by its last word; a person needs a surname that is not an
    everyday word ("Alice Chen" yes, "Code Review" no)."""
    words = phrase.split(" ")
    while words and words[0] in TITLE_STOPWORDS:
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
    if len(words) <= 3 and last.lower() not in common_words and not last.isupper():
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


def _package_args(args: str) -> Iterable[tuple[int, str]]:
    """(offset in args, package) for each package named after an install verb."""
    skip_next = False
    for token in re.finditer(r"\S+", args):
        raw = token.group()
        if skip_next:
            skip_next = False
            continue
        if raw.startswith("-"):
            skip_next = raw in FLAGS_WITH_VALUE
            continue
        if raw.lower() in ARG_STOPWORDS:
            if raw.lower() in {"and", "or"}:
                continue
            return
        ends_sentence = raw.endswith((".", ",", ";", ":", ")", "!", "?"))
        bare = raw.strip("\"'(),.;:!?")
        bare = re.split(r"[<>=!~\[]", bare, maxsplit=1)[0]
        # drop a version: @scope/pkg@^1.2, pkg@1.2
        bare = re.sub(r"(?<=.)@[^/]*$", "", bare) if bare.startswith("@") else bare.split("@")[0]
        match = PACKAGE_ARG_RE.fullmatch(bare)
        if match is None or len(bare) < 2 or bare.isdigit():
            return
        yield token.start() + raw.index(bare[0]), bare
        if ends_sentence:
            return


def scan_code_context(
    text: str, canonical: Mapping[str, tuple[str, EntityType]]
) -> list[PatternHit]:
    """Packages named by install commands and import statements.

    `canonical` maps a casefolded surface to the lexicon's (name, type), so `pip install fastapi`
    gives `FastAPI`; other names keep their spelling and are libraries (tools for brew/apt).
    """
    hits: list[PatternHit] = []

    def add(start: int, package: str, default_type: EntityType) -> None:
        name, etype = canonical.get(package.casefold(), (package, default_type))
        hits.append(
            PatternHit(
                start,
                start + len(package),
                name,
                etype,
                CODE_CONTEXT_CONFIDENCE,
                "code",
                PRIORITY_CODE,
                (package,) if package != name else (),
            )
        )

    for match in INSTALL_RE.finditer(text):
        default = EntityType.TOOL if match.group("mgr") in TOOL_MANAGERS else EntityType.LIBRARY
        base = match.start("args")
        for offset, package in _package_args(match.group("args")):
            add(base + offset, package, default)
    stdlib = sys.stdlib_module_names
    for match in PY_IMPORT_RE.finditer(text):
        group = "from" if match.group("from") else "imp"
        chunk = match.group(group)
        for module in re.finditer(r"[A-Za-z_][\w.]*", chunk):
            root = module.group().split(".", 1)[0]
            if root in ("as",) or root in stdlib or root.startswith("_"):
                continue
            add(match.start(group) + module.start(), root, EntityType.LIBRARY)
    for match in JS_IMPORT_RE.finditer(text):
        package = match.group("pkg")
        if package.startswith(".") or package.removeprefix("node:") in NODE_BUILTINS:
            continue
        add(match.start("pkg"), package, EntityType.LIBRARY)
    return hits


def scan_patterns(text: str, common_words: frozenset[str]) -> PatternScan:
    """Run every shape rule over `text`; candidates may overlap (the caller resolves that)."""
    scan = PatternScan()
    _scan_shields(text, scan)
    _scan_shapes(text, scan)
    _scan_weak_shapes(text, scan, common_words)
    return scan


class LiteralMatcher:
    """Substring matching for names with Chinese characters.

    Chinese has no spaces and jieba splits unknown names unpredictably (阿里云 → 阿里 / 云), so
    token patterns would miss them; one alternation regex, longest first, finds them all.
    """

    def __init__(self, surfaces: Mapping[str, int]) -> None:
        self._keys = {surface.casefold(): key for surface, key in surfaces.items()}
        ordered = sorted(self._keys, key=len, reverse=True)
        self._regex = (
            re.compile("|".join(re.escape(s) for s in ordered), re.IGNORECASE) if ordered else None
        )

    def __bool__(self) -> bool:
        return self._regex is not None

    def find(self, text: str) -> list[tuple[int, int, int]]:
        """(start, end, key) for every non-overlapping occurrence."""
        if self._regex is None:
            return []
        return [
            (m.start(), m.end(), self._keys[m.group().casefold()])
            for m in self._regex.finditer(text)
        ]
