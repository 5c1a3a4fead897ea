"""Build the shipped extraction lexicon from offline sources, reproducibly.

Writes two files into `src/memoryd/extraction/data/`:

* `lexicon.jsonl`: one JSON object per line,
  `{"name", "type", "aliases": [...], "source", "case_sensitive": [...]}`
  (`case_sensitive` lists the surfaces that must match with their exact case, because in
  lower case they are everyday English: "Solid", "Cursor", "Black").
* `common_words.txt`: the 5,000 most frequent English words, used at run time to keep
  shape-based guesses ("Code Review", a capitalised slot word) out of the graph.

Sources, in priority order (the first source to claim a name wins):

1. `CURATED` below: ~350 languages, databases, frameworks, tools, clouds, editors, agents
   and companies with their canonical casing (`FastAPI`, `PostgreSQL`) and hand-checked
   aliases (`Postgres`, `k8s`).
2. PyPI: `pypi.tsv` (name, version, month, rank_among_15000_most_downloaded, summary), the
   `--pypi-top` best-ranked names.
3. npm: `npm.tsv` (name, version, downloads_a_month, summary), the `--npm-top` most
   downloaded names.

Registry names are dropped when they would produce false entities in prose:

* shorter than 3 characters, or purely digits/punctuation;
* a common English word: single-token names whose wordfreq Zipf frequency is >= 2.5
  (one use in three million words or more: `six`, `click`, `requests`, `scheduler`).
  Hyphenated names are kept, since they only match the literal hyphenated form. Code context
  still finds dropped names at run time (`pip install requests`, `import requests`);
* in `DENYLIST`: developer jargon that names a format, protocol or concept more often than the
  package (`json`, `yaml`, `uuid`, `jwt`, `glob`, `tmp`);
* type stubs (`types-*`, `*-stubs`, `@types/*`, `mypy-boto3-*`): never written in prose.

Type: curated entries carry their own type. A registry package is a `tool` when its summary
says it is a command-line program, linter, formatter, bundler, compiler, test runner or package
manager (and does not call itself a library, module, framework, SDK or plugin), or its name
ends in `-cli`; otherwise a `library`. Registry aliases: only the underscore spelling of
hyphenated PyPI names (`typing_extensions`), when it passes the filters and is not taken.

Kind: curated entries also carry a `kind`, the section of `CURATED_SECTIONS` they are listed
in (`language`, `database`, `framework`, `cloud`, `editor`, `agent`, `company` ...), so recall can
ask which known entities are databases. Registry entries have none.

Usage (build-time only; wordfreq is not a runtime dependency of memoryd):

    pip install --target /tmp/lexdeps wordfreq==3.1.1
    PYTHONPATH=/tmp/lexdeps .venv/bin/python scripts/build_lexicon.py \
        --packages /work/.library/env/packages

Today's registry lists no longer give the shipped file byte for byte (five npm packages'
summaries changed, which flips them from tool to library), so after editing only the curated
kinds, rewrite just those (no wordfreq needed):

    .venv/bin/python scripts/build_lexicon.py --kinds-only
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import logging
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("build_lexicon")

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "src" / "memoryd" / "extraction" / "data"

ZIPF_COMMON = 2.5
"""Zipf frequency (log10 of uses per billion words) at or above which a single-word registry
name counts as everyday English: 2.5 is about one use in three million words ("bottleneck",
"scheduler", "overrides" are above it; "numpy" scores 1.9, "redis" 2.0)."""

COMMON_WORDS_N = 5000

Curated = tuple[str, str, tuple[str, ...]]
"""(canonical name, type, aliases)."""

# Sections of (kind, entries): the kind says what sort of tool, library or organization an
# entry is (`database`, `framework`, `cloud` ...), so recall can ask for one sort. Types:
# languages, databases, platforms, editors and CLIs are `tool`; importable frameworks and
# packages are `library`; companies and foundations are `organization`; protocols and
# specifications are `concept`.
CURATED_SECTIONS: list[tuple[str, list[Curated]]] = [
    # languages
    (
        "language",
        [
            ("Python", "tool", ("python3", "CPython")),
            ("Rust", "tool", ("rustlang",)),
            ("TypeScript", "tool", ()),
            ("JavaScript", "tool", ("ECMAScript",)),
            ("Go", "tool", ("Golang",)),
            ("Java", "tool", ()),
            ("Kotlin", "tool", ()),
            ("Swift", "tool", ()),
            ("C++", "tool", ("cpp",)),
            ("C#", "tool", ("CSharp",)),
            ("Ruby", "tool", ()),
            ("PHP", "tool", ("php",)),
            ("Scala", "tool", ()),
            ("Elixir", "tool", ()),
            ("Erlang", "tool", ()),
            ("Haskell", "tool", ()),
            ("Lua", "tool", ()),
            ("Perl", "tool", ()),
            ("Dart", "tool", ()),
            ("Zig", "tool", ("Ziglang",)),
            ("OCaml", "tool", ()),
            ("Clojure", "tool", ()),
            ("SQL", "tool", ()),
            ("Bash", "tool", ()),
            ("Zsh", "tool", ("zsh",)),
            ("PowerShell", "tool", ()),
            ("HTML", "tool", ("HTML5", "html")),
            ("CSS", "tool", ("CSS3", "css")),
            ("WebAssembly", "tool", ("Wasm",)),
        ],
    ),
    # runtimes
    (
        "runtime",
        [
            ("Node.js", "tool", ("NodeJS", "nodejs")),
            ("Deno", "tool", ()),
            ("Bun", "tool", ()),
        ],
    ),
    # databases, queues, search engines
    (
        "database",
        [
            ("PostgreSQL", "tool", ("Postgres", "pgsql")),
            ("MySQL", "tool", ()),
            ("MariaDB", "tool", ()),
            ("SQLite", "tool", ("sqlite3",)),
            ("Redis", "tool", ()),
            ("Valkey", "tool", ()),
            ("MongoDB", "tool", ("Mongo",)),
            ("Kuzu", "tool", ("KuzuDB", "Kùzu")),
            ("LadybugDB", "tool", ()),
            ("Neo4j", "tool", ()),
            ("Elasticsearch", "tool", ()),
            ("OpenSearch", "tool", ()),
            ("Cassandra", "tool", ()),
            ("DynamoDB", "tool", ()),
            ("ClickHouse", "tool", ()),
            ("DuckDB", "tool", ()),
            ("BigQuery", "tool", ()),
            ("Snowflake", "tool", ()),
            ("Supabase", "tool", ()),
            ("Firebase", "tool", ()),
            ("Memcached", "tool", ()),
            ("etcd", "tool", ()),
            ("CockroachDB", "tool", ()),
            ("InfluxDB", "tool", ()),
            ("TimescaleDB", "tool", ()),
            ("Pinecone", "tool", ()),
            ("Qdrant", "tool", ()),
            ("Weaviate", "tool", ()),
            ("Milvus", "tool", ()),
            ("ChromaDB", "tool", ()),
            ("LanceDB", "tool", ()),
            ("pgvector", "library", ()),
            ("Tantivy", "library", ()),
            ("Lucene", "library", ("Apache Lucene",)),
            ("Meilisearch", "tool", ()),
            ("Typesense", "tool", ()),
            ("Orama", "library", ()),
            ("FAISS", "library", ("faiss-cpu",)),
        ],
    ),
    # GPU and media toolkits
    (
        "message-broker",
        [
            ("RabbitMQ", "tool", ()),
            ("Kafka", "tool", ("Apache Kafka",)),
        ],
    ),
    (
        "toolkit",
        [
            ("CUDA", "tool", ()),
            ("FFmpeg", "tool", ()),
        ],
    ),
    # frameworks and libraries
    (
        "framework",
        [
            ("React", "library", ("ReactJS", "React.js")),
            ("Solid", "library", ("SolidJS", "Solid.js")),
            ("Vue", "library", ("Vue.js", "VueJS")),
            ("Svelte", "library", ()),
            ("SvelteKit", "library", ()),
            ("Angular", "library", ()),
            ("Next.js", "library", ("NextJS", "Nextjs")),
            ("Nuxt", "library", ("Nuxt.js",)),
            ("Remix", "library", ()),
            ("Astro", "library", ()),
            ("Express", "library", ("Express.js", "ExpressJS")),
            ("NestJS", "library", ()),
            ("Fastify", "library", ()),
            ("Hono", "library", ()),
            ("FastAPI", "library", ()),
            ("Django", "library", ()),
            ("Django REST framework", "library", ("djangorestframework", "DRF")),
            ("Flask", "library", ()),
            ("Starlette", "library", ()),
            ("Pydantic", "library", ()),
            ("SQLAlchemy", "library", ()),
            ("Alembic", "library", ()),
            ("Celery", "library", ()),
            ("NumPy", "library", ()),
            ("pandas", "library", ()),
            ("Polars", "library", ()),
            ("PyTorch", "library", ("torch",)),
            ("TensorFlow", "library", ()),
            ("JAX", "library", ()),
            ("scikit-learn", "library", ("sklearn",)),
            ("spaCy", "library", ()),
            ("jieba", "library", ()),
            ("zhconv", "library", ()),
            ("LangChain", "library", ()),
            ("LangGraph", "library", ()),
            ("LlamaIndex", "library", ("llama-index",)),
            ("Tailwind CSS", "library", ("Tailwind", "tailwindcss")),
            ("Bootstrap", "library", ()),
            ("jQuery", "library", ()),
            ("Redux", "library", ()),
            ("Zustand", "library", ()),
            ("TanStack Query", "library", ("React Query",)),
            ("tRPC", "library", ()),
            ("GraphQL", "tool", ()),
            ("Prisma", "library", ()),
            ("Drizzle", "library", ("Drizzle ORM",)),
            ("Sequelize", "library", ()),
            ("TypeORM", "library", ()),
            ("Mongoose", "library", ()),
            ("Axios", "library", ()),
            ("Lodash", "library", ()),
            ("Zod", "library", ()),
            ("RxJS", "library", ()),
            ("Three.js", "library", ("ThreeJS",)),
            ("D3.js", "library", ()),
            ("Electron", "library", ()),
            ("Tauri", "library", ()),
            ("React Native", "library", ()),
            ("Flutter", "library", ()),
            ("SwiftUI", "library", ()),
            ("Jetpack Compose", "library", ()),
            ("Spring Boot", "library", ()),
            ("Ruby on Rails", "library", ("Rails",)),
            ("Laravel", "library", ()),
            ("Tokio", "library", ()),
            ("Serde", "library", ()),
            ("Axum", "library", ()),
            ("Actix", "library", ("actix-web",)),
            ("httpx", "library", ()),
            ("aiohttp", "library", ()),
            ("asyncio", "library", ()),
            ("Typer", "library", ()),
            ("Click", "library", ()),
            ("Rich", "library", ()),
            ("Textual", "library", ()),
            ("Jinja", "library", ("Jinja2",)),
            ("NetworkX", "library", ()),
            ("PyArrow", "library", ("Apache Arrow",)),
            ("Hugging Face Transformers", "library", ()),
            ("Tornado", "library", ()),
            ("Twisted", "library", ()),
            ("Trio", "library", ()),
            ("Pillow", "library", ("PIL",)),
            ("Marshmallow", "library", ()),
            ("Tenacity", "library", ()),
            ("Watchdog", "library", ()),
            ("Ray", "library", ()),
            ("Dash", "library", ("Plotly Dash",)),
            ("Moment.js", "library", ("Moment",)),
            ("Chai", "library", ()),
            ("Sharp", "library", ()),
            ("Faker", "library", ()),
            ("Handlebars", "library", ()),
            ("Shapely", "library", ()),
            ("Bokeh", "library", ()),
            ("Pino", "library", ()),
            ("Bluebird", "library", ()),
            ("Anthropic SDK", "library", ()),
            ("MCP SDK", "library", ()),
        ],
    ),
    # dev tools: VCS, CI, containers, infrastructure
    (
        "devtool",
        [
            ("git", "tool", ()),
            ("GitHub", "tool", ()),
            ("GitLab", "tool", ()),
            ("Bitbucket", "tool", ()),
            ("Gitee", "tool", ("码云",)),
            ("Docker", "tool", ()),
            ("Docker Compose", "tool", ("docker-compose",)),
            ("Podman", "tool", ()),
            ("Kubernetes", "tool", ("k8s",)),
            ("Helm", "tool", ()),
            ("Terraform", "tool", ()),
            ("Ansible", "tool", ()),
            ("Pulumi", "tool", ()),
            ("Nginx", "tool", ()),
            ("Caddy", "tool", ()),
            ("Traefik", "tool", ()),
            ("Vercel", "tool", ()),
            ("Netlify", "tool", ()),
            ("Heroku", "tool", ()),
            ("Fly.io", "tool", ()),
            ("Sentry", "tool", ()),
            ("Datadog", "tool", ()),
            ("Grafana", "tool", ()),
            ("Prometheus", "tool", ()),
            ("OpenTelemetry", "tool", ("OTel",)),
            ("Kibana", "tool", ()),
            ("Postman", "tool", ()),
            ("curl", "tool", ()),
            ("jq", "tool", ()),
            ("ripgrep", "tool", ()),
            ("fzf", "tool", ()),
            ("tmux", "tool", ()),
            ("Homebrew", "tool", ("brew",)),
            ("Ollama", "tool", ()),
        ],
    ),
    # continuous integration: the build-and-test systems a repository has one of
    (
        "ci",
        [
            ("GitHub Actions", "tool", ()),
            ("Jenkins", "tool", ()),
            ("CircleCI", "tool", ()),
            ("Travis CI", "tool", ()),
        ],
    ),
    # clouds and hosted platforms
    (
        "cloud",
        [
            ("AWS", "tool", ("Amazon Web Services", "aws")),
            ("AWS Lambda", "tool", ()),
            ("Amazon S3", "tool", ()),
            ("Amazon EC2", "tool", ("EC2",)),
            ("GCP", "tool", ("Google Cloud", "Google Cloud Platform")),
            ("Azure", "tool", ("Microsoft Azure",)),
            ("Cloudflare Workers", "tool", ()),
            ("Alibaba Cloud", "tool", ("阿里云", "Aliyun")),
            ("Tencent Cloud", "tool", ("腾讯云",)),
            ("Huawei Cloud", "tool", ("华为云",)),
        ],
    ),
    # operating systems
    (
        "os",
        [
            ("Linux", "tool", ()),
            ("macOS", "tool", ("Mac OS X", "OS X")),
            ("Windows", "tool", ()),
            ("Ubuntu", "tool", ()),
            ("Debian", "tool", ()),
            ("Alpine Linux", "tool", ("Alpine",)),
            ("Fedora", "tool", ()),
            ("Arch Linux", "tool", ()),
            ("WSL", "tool", ()),
            ("iOS", "tool", ()),
            ("Android", "tool", ()),
        ],
    ),
    # editors and IDEs
    (
        "editor",
        [
            ("VS Code", "tool", ("Visual Studio Code", "VSCode")),
            ("Visual Studio", "tool", ()),
            ("PyCharm", "tool", ()),
            ("IntelliJ IDEA", "tool", ("IntelliJ",)),
            ("Vim", "tool", ("vim",)),
            ("Neovim", "tool", ("nvim",)),
            ("Emacs", "tool", ()),
            ("Xcode", "tool", ()),
            ("Android Studio", "tool", ()),
            ("Zed", "tool", ()),
            ("Jupyter", "tool", ("JupyterLab", "Jupyter Notebook")),
        ],
    ),
    # coding agents and AI assistants
    (
        "agent",
        [
            ("Claude Code", "tool", ()),
            ("Claude", "tool", ()),
            ("Cursor", "tool", ()),
            ("Codex", "tool", ("Codex CLI",)),
            ("Windsurf", "tool", ()),
            ("GitHub Copilot", "tool", ("Copilot",)),
            ("Gemini CLI", "tool", ()),
            ("Gemini", "tool", ()),
            ("ChatGPT", "tool", ()),
            ("Aider", "tool", ()),
            ("OpenClaw", "tool", ()),
        ],
    ),
    # chat, issue, note and design apps
    (
        "app",
        [
            ("Slack", "tool", ()),
            ("Discord", "tool", ()),
            ("Jira", "tool", ()),
            ("Notion", "tool", ()),
            ("Obsidian", "tool", ()),
            ("Figma", "tool", ()),
            ("Feishu", "tool", ("飞书", "Lark Suite")),
            ("DingTalk", "tool", ("钉钉",)),
            ("WeChat", "tool", ("微信",)),
        ],
    ),
    # package managers: a project installs its packages with one
    (
        "package-manager",
        [
            ("npm", "tool", ()),
            ("pnpm", "tool", ()),
            ("Yarn", "tool", ()),
            ("pip", "tool", ()),
            ("uv", "tool", ()),
            ("pipx", "tool", ()),
            ("Poetry", "tool", ()),
            ("Conda", "tool", ("Anaconda", "Miniconda")),
        ],
    ),
    # bundlers and compilers of front-end code: one per build
    (
        "bundler",
        [
            ("Vite", "tool", ("Vitejs",)),
            ("webpack", "tool", ()),
            ("Rollup", "tool", ()),
            ("esbuild", "tool", ()),
            ("Turbopack", "tool", ()),
            ("SWC", "tool", ("swc",)),
            ("Babel", "tool", ()),
        ],
    ),
    # test runners: one per language of a project
    (
        "test-runner",
        [
            ("pytest", "tool", ("py.test",)),
            ("Jest", "tool", ("jest",)),
            ("Vitest", "tool", ()),
            ("Mocha", "tool", ()),
        ],
    ),
    # browser automation for end-to-end tests: one per project
    (
        "e2e-testing",
        [
            ("Playwright", "tool", ()),
            ("Puppeteer", "tool", ()),
            ("Selenium", "tool", ()),
            ("Cypress", "tool", ()),
        ],
    ),
    # build systems: one per project
    (
        "build-tool",
        [
            ("CMake", "tool", ()),
            ("Bazel", "tool", ()),
            ("Gradle", "tool", ()),
            ("Maven", "tool", ()),
            ("Cargo", "tool", ("cargo",)),
        ],
    ),
    # linters, formatters and type checkers: a project runs several side by side
    (
        "linter",
        [
            ("Ruff", "tool", ("ruff",)),
            ("mypy", "tool", ()),
            ("Pyright", "tool", ()),
            ("Black", "tool", ()),
            ("isort", "tool", ()),
            ("Flake8", "tool", ()),
            ("Pylint", "tool", ()),
            ("ESLint", "tool", ()),
            ("Prettier", "tool", ()),
            ("Biome", "tool", ()),
        ],
    ),
    # other development tools: environments, hooks, docs, servers, schedulers
    (
        "devtool",
        [
            ("virtualenv", "tool", ()),
            ("tox", "tool", ()),
            ("nox", "tool", ()),
            ("Hatch", "tool", ("hatchling",)),
            ("pre-commit", "tool", ()),
            ("Hypothesis", "library", ()),
            ("Sphinx", "tool", ()),
            ("MkDocs", "tool", ()),
            ("Storybook", "tool", ()),
            ("Husky", "tool", ()),
            ("Sass", "tool", ("SCSS",)),
            ("twine", "tool", ()),
            ("Locust", "tool", ()),
            ("Prefect", "tool", ()),
            ("Airflow", "tool", ("Apache Airflow",)),
            ("rustup", "tool", ()),
            ("uvicorn", "tool", ()),
            ("Gunicorn", "tool", ()),
        ],
    ),
    # organizations
    (
        "company",
        [
            ("Anthropic", "organization", ()),
            ("OpenAI", "organization", ()),
            ("Google", "organization", ("谷歌",)),
            ("Microsoft", "organization", ("微软",)),
            ("Amazon", "organization", ("亚马逊",)),
            ("Meta", "organization", ()),
            ("Apple", "organization", ()),
            ("Mozilla", "organization", ()),
            ("Cloudflare", "organization", ()),
            ("Hugging Face", "organization", ("HuggingFace",)),
            ("JetBrains", "organization", ()),
            ("Red Hat", "organization", ()),
            ("Oracle", "organization", ()),
            ("IBM", "organization", ()),
            ("NVIDIA", "organization", ("Nvidia",)),
            ("Intel", "organization", ()),
            ("AMD", "organization", ()),
            ("Alibaba", "organization", ("阿里巴巴",)),
            ("Tencent", "organization", ("腾讯",)),
            ("ByteDance", "organization", ("字节跳动",)),
            ("Baidu", "organization", ("百度",)),
            ("Huawei", "organization", ("华为",)),
            ("DeepSeek", "organization", ()),
            ("Astral", "organization", ()),
        ],
    ),
    # foundations and standards bodies
    (
        "foundation",
        [
            ("Python Software Foundation", "organization", ("PSF",)),
            ("Apache Software Foundation", "organization", ()),
            ("Linux Foundation", "organization", ()),
            ("CNCF", "organization", ()),
            ("W3C", "organization", ()),
            ("IETF", "organization", ()),
        ],
    ),
    # websites
    (
        "website",
        [
            ("Stack Overflow", "tool", ("StackOverflow",)),
        ],
    ),
    # protocols and specifications
    (
        "protocol",
        [
            ("MCP", "concept", ("Model Context Protocol",)),
            ("LSP", "concept", ("Language Server Protocol",)),
            ("OpenAPI", "concept", ("Swagger",)),
            ("gRPC", "concept", ()),
            ("Protocol Buffers", "concept", ("protobuf",)),
            ("WebSocket", "concept", ("WebSockets",)),
            ("OAuth", "concept", ("OAuth2",)),
        ],
    ),
]
CURATED: list[Curated] = [entry for _, entries in CURATED_SECTIONS for entry in entries]
CURATED_KINDS: dict[str, str] = {
    name: kind for kind, entries in CURATED_SECTIONS for name, _, _ in entries
}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Surfaces that are everyday English in lower case (hand-checked, not wordfreq: its corpus is
# tech-heavy enough that "python" and "github" score as common words). They match only with
# their exact case, and a sentence-initial hit gets a lower confidence at run time.
CASE_SENSITIVE: frozenset[str] = _words(
    """
    Rust Go Swift Ruby Dart Elixir Bun Snowflake Cassandra React Solid Angular Remix Astro
    Express Drizzle Electron Flutter Rails Click Rich Textual Helm Jenkins Sentry Prometheus
    Postman Windows Alpine Claude Codex Gemini Cursor Windsurf Aider Copilot Discord Slack
    Notion Obsidian Yarn Poetry Hatch Ruff ruff Black Hypothesis Sphinx Prettier Jest jest
    Mocha Cypress Cargo cargo Rollup Biome Babel Bootstrap Maven Caddy Meta Apple Amazon Oracle
    Intel Astral Swagger Pinecone brew Tornado Twisted Trio Pillow Marshmallow Tenacity Watchdog
    Ray Dash Moment Chai Sharp Husky Locust Prefect Airflow Mongo Faker Handlebars Shapely
    Pino Bluebird twine
    """
)
"""Also Stack Overflow and Red Hat: multi-word, but an error and a colour in lower case."""
CASE_SENSITIVE_PHRASES: frozenset[str] = frozenset({"Stack Overflow", "Red Hat"})

# Developer jargon that, as a registry name, would tag a format or concept as a package.
DENYLIST: frozenset[str] = _words(
    """
    api app apps arg args ast async await base64 build cache cli client color colors common
    config core cors cron crypto csv css date debug decorator deprecated diff dom dotenv env
    error errors events fetch file files glob graph grpc hash html http https ini json json5
    jsonschema jwt kit lib lint loader log logger logging lru markdown md5 mime mock models node
    oauth object options parse parser path paths plugin process promise proto protocol queue
    readline regex request retry rsa schema scp semver server sha1 sha256 shell sql ssh ssl
    stream string sync tar tcp template test tests text time timeout tls tld tmp toml tsx types
    url uri util utils uuid validator version web websocket xml yaml zip
    affine backoff bytecode compressible datetime decouple deprecation distro globals humanize
    hyperlink inflight keyring logbook monotonic multipart parameterized retrying
    synchronicity validators abbrev asn1 boolbase callsites camelcase commondir decamelize dedent
    domexception entrypoints etag filelist globalthis isarray isobject pluralize punycode
    setimmediate stringcase typedarray unpipe wordwrap wrappy xtend
    """
)

TOOL_SUMMARY_RE = re.compile(
    r"\b(command[- ]line (tool|utility|interface|program|client|app|environment)|"
    r"CLI (tool|for|to)|linter|code formatter|opinionated formatter|bundler|test runner|"
    r"task runner|package manager|dependency manager|build tool|static type checker)",
    re.IGNORECASE,
)
LIBRARY_SUMMARY_RE = re.compile(
    r"\b(library|module|framework|extensions?|bindings|sdk|api client|toolkit|plugins?)\b",
    re.IGNORECASE,
)
STUB_RE = re.compile(r"^(types-|@types/|mypy-boto3-)|-stubs$")
NAME_OK_RE = re.compile(r"[A-Za-z]")


@dataclass
class Entry:
    name: str
    type: str
    source: str
    aliases: list[str] = field(default_factory=list)
    case_sensitive: list[str] = field(default_factory=list)
    kind: str = ""

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.kind:
            data["kind"] = self.kind
        data["aliases"] = self.aliases
        data["source"] = self.source
        if self.case_sensitive:
            data["case_sensitive"] = self.case_sensitive
        return data


def _wordfreq() -> Any:
    """wordfreq, a build-time tool only (no stubs; not a dependency of memoryd)."""
    return importlib.import_module("wordfreq")


def _zipf(word: str) -> float:
    return float(_wordfreq().zipf_frequency(word, "en"))


def _single_token(name: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9]+", name) is not None


def is_common_word(name: str) -> bool:
    """Everyday English: a single word with Zipf >= ZIPF_COMMON."""
    return _single_token(name) and _zipf(name.lower()) >= ZIPF_COMMON


def registry_name_ok(name: str) -> bool:
    """Whether a registry name can go in the lexicon without flooding prose with false hits."""
    bare = name.lower()
    if len(bare) < 3 or not NAME_OK_RE.search(bare):
        return False
    if STUB_RE.search(bare) or bare in DENYLIST:
        return False
    return not is_common_word(bare)


def read_tsv(path: Path) -> Iterator[dict[str, str]]:
    csv.field_size_limit(sys.maxsize)
    with path.open(encoding="utf-8", newline="") as handle:
        yield from csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)


def top_pypi(path: Path, top: int) -> list[tuple[str, str]]:
    ranked: list[tuple[int, str, str]] = []
    for row in read_tsv(path):
        rank = row.get("rank_among_15000_most_downloaded") or ""
        if rank.isdigit():
            ranked.append((int(rank), row["name"], row.get("summary") or ""))
    ranked.sort()
    return [(name, summary) for _, name, summary in ranked[:top]]


def top_npm(path: Path, top: int) -> list[tuple[str, str]]:
    rows: list[tuple[int, str, str]] = []
    for row in read_tsv(path):
        downloads = row.get("downloads_a_month") or ""
        if downloads.isdigit():
            rows.append((-int(downloads), row["name"], row.get("summary") or ""))
    rows.sort()
    return [(name, summary) for _, name, summary in rows[:top]]


def registry_type(name: str, summary: str) -> str:
    """`tool` for programs people run, `library` for what code imports (summary heuristics)."""
    if name.endswith("-cli"):
        return "tool"
    if TOOL_SUMMARY_RE.search(summary) and not LIBRARY_SUMMARY_RE.search(summary):
        return "tool"
    return "library"


def pypi_aliases(name: str) -> list[str]:
    """The import-style spelling of a hyphenated name. Stripping `python-`/`-python` is not
    done: it names the product or format the package wraps (`python-keycloak` → keycloak,
    `python-frontmatter` → frontmatter), not the package."""
    return [name.replace("-", "_")] if "-" in name else []


class Builder:
    """Accumulates entries; the first source to claim a surface (casefolded) keeps it."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.taken: dict[str, Entry] = {}
        self.dropped: Counter[str] = Counter()

    @staticmethod
    def key(surface: str) -> str:
        return re.sub(r"[-_.]+", "-", surface.casefold())

    def add_curated(self, name: str, etype: str, aliases: Iterable[str]) -> None:
        entry = Entry(name=name, type=etype, source="curated", kind=CURATED_KINDS[name])
        for surface in (name, *aliases):
            key = self.key(surface)
            if self.taken.get(key, entry) is not entry:
                raise ValueError(f"curated surface {surface!r} is listed twice")
            self.taken[key] = entry
            if surface != name:
                entry.aliases.append(surface)
            if surface in CASE_SENSITIVE or surface in CASE_SENSITIVE_PHRASES:
                entry.case_sensitive.append(surface)
        self.entries.append(entry)

    def add_registry(self, name: str, summary: str, source: str) -> None:
        key = self.key(name)
        if key in self.taken:
            other = self.taken[key]
            if other.source in ("pypi", "npm") and other.source != source:
                other.source = "pypi+npm"
            self.dropped["already listed"] += 1
            return
        if not registry_name_ok(name):
            self.dropped["filtered (short, common word, jargon or stub)"] += 1
            return
        entry = Entry(name=name, type=registry_type(name, summary), source=source)
        self.taken[key] = entry
        if source == "pypi":
            for alias in pypi_aliases(name):
                alias_key = self.key(alias)  # typing_extensions keys like typing-extensions
                if self.taken.get(alias_key, entry) is not entry or not registry_name_ok(alias):
                    continue
                self.taken[alias_key] = entry
                entry.aliases.append(alias)
        self.entries.append(entry)


def write_outputs(builder: Builder, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "lexicon.jsonl").open("w", encoding="utf-8") as handle:
        for entry in builder.entries:
            handle.write(json.dumps(entry.as_json(), ensure_ascii=False, sort_keys=False) + "\n")
    top = _wordfreq().top_n_list("en", COMMON_WORDS_N)
    words = [w for w in top if re.fullmatch(r"[a-z]+", w)]
    (out_dir / "common_words.txt").write_text("\n".join(words) + "\n", encoding="utf-8")


def rewrite_kinds(path: Path) -> int:
    """Set the `kind` of each curated line of an existing lexicon from `CURATED_SECTIONS`.

    A full rebuild reads the registry lists as they are today, whose summaries drift (a
    package's type may flip); this touches only the curated lines' `kind` and leaves every
    other line byte for byte. Returns how many lines changed.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    changed = 0
    seen: set[str] = set()
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("source") != "curated":
            continue
        name = row["name"]
        if name not in CURATED_KINDS:
            raise ValueError(f"curated line {name!r} is not in CURATED_SECTIONS")
        seen.add(name)
        ordered: dict[str, Any] = {"name": name, "type": row["type"]}
        ordered["kind"] = CURATED_KINDS[name]
        ordered.update((k, v) for k, v in row.items() if k not in ("name", "type", "kind"))
        rewritten = json.dumps(ordered, ensure_ascii=False)
        if rewritten != line:
            lines[index] = rewritten
            changed += 1
    missing = sorted(set(CURATED_KINDS) - seen)
    if missing:
        raise ValueError(f"curated entries missing from {path}: {missing}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--packages", type=Path, default=Path("/work/.library/env/packages"))
    parser.add_argument("--pypi-top", type=int, default=2500)
    parser.add_argument("--npm-top", type=int, default=1500)
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    parser.add_argument(
        "--kinds-only",
        action="store_true",
        help="only rewrite the curated lines' `kind` in the existing lexicon.jsonl",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.kinds_only:
        changed = rewrite_kinds(args.out / "lexicon.jsonl")
        log.info("set kind on %d curated lines of %s", changed, args.out / "lexicon.jsonl")
        return 0
    try:
        _wordfreq()
    except ImportError:
        log.error("wordfreq is needed to build the lexicon: pip install wordfreq==3.1.1")
        return 2

    builder = Builder()
    for name, etype, aliases in CURATED:
        builder.add_curated(name, etype, aliases)
    curated_surfaces = {s for e in builder.entries for s in (e.name, *e.aliases)}
    unknown = (CASE_SENSITIVE | CASE_SENSITIVE_PHRASES) - curated_surfaces
    if unknown:
        log.error("CASE_SENSITIVE names surfaces that no curated entry has: %s", sorted(unknown))
        return 2
    for name, summary in top_pypi(args.packages / "pypi.tsv", args.pypi_top):
        builder.add_registry(name, summary, "pypi")
    for name, summary in top_npm(args.packages / "npm.tsv", args.npm_top):
        builder.add_registry(name, summary, "npm")
    write_outputs(builder, args.out)

    by_source = Counter(e.source for e in builder.entries)
    by_type = Counter(e.type for e in builder.entries)
    log.info("wrote %d entries to %s", len(builder.entries), args.out / "lexicon.jsonl")
    log.info("by source: %s", dict(sorted(by_source.items())))
    log.info("by type: %s", dict(sorted(by_type.items())))
    log.info("dropped: %s", dict(builder.dropped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
