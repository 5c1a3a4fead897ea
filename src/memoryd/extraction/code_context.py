"""Packages and tools named by code context (`scan_code_context`): install commands
(`pip install httpx`, `brew install jq`, an install command ending at its line) and import
statements (`from pydantic import`, `require('zod')`) name a `library` (a `tool` for
`brew`/`apt`), even when the lexicon left it out as a common word. A pattern stage of
`extraction.patterns`, run by `extraction.pipeline`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping

from memoryd.extraction.patterns import (
    CODE_CONTEXT_CONFIDENCE,
    PRIORITY_CODE,
    PatternHit,
    _words,
    finditer_holding,
)
from memoryd.models import EntityType

# --- code context ------------------------------------------------------------------------------

INSTALL_RE = re.compile(
    r"\b(?P<mgr>pip3?|uv\s+pip|uv|poetry|pipx|pdm|conda|mamba|npm|pnpm|yarn|bun|npx|cargo|gem|"
    r"brew|apt-get|apt|dnf|yum|apk)[ \t]+(?P<verb>install|add|i)\b(?:[ \t]+(?P<args>[^\n;&|`]+))?"
)
"""An install command and its arguments, on one line: `bun install` closing a line names no
package, and the next line (`bun dev`) is another command."""
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
        manager = match.group("mgr").split()[0]
        if manager.casefold() in canonical:  # the package manager is a tool used: `bun install`
            add(match.start("mgr"), manager, EntityType.TOOL)
        if match.group("args") is None:
            continue
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
    quoted = "'" in text or '"' in text  # every JS import names its package in quotes
    js = finditer_holding(JS_IMPORT_RE, text, "from", "require(", "import") if quoted else ()
    for match in js:
        package = match.group("pkg")
        if package.startswith(".") or package.removeprefix("node:") in NODE_BUILTINS:
            continue
        add(match.start("pkg"), package, EntityType.LIBRARY)
    return hits
