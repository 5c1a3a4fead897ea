"""Provider secret formats from gitleaks' default rule set, read as data (stdlib only).

`data/gitleaks.toml` is gitleaks' own `config/gitleaks.toml` (MIT, `data/GITLEAKS-LICENSE.txt`),
unchanged: 220 maintained rules, each a regex, the keywords that must occur for it to run,
an optional entropy floor and allowlists. `data/README.md` says which version it is and how to
update it. The rules are RE2 (Go) regexes; `translate` turns each into Python `re` syntax
(a flag group in mid-pattern scopes to the rest of its group, `\\z`, POSIX classes, literal
`[` in a class), and they are compiled with `re.ASCII`, as RE2's `\\w`, `\\s` and `\\b` are.

Why this and not `detect-secrets`: importing its plugins (it loads its whole scanner,
`requests` and YAML) takes most of a capture hook's budget, and it knows 27 formats to
gitleaks' 220. The hook reads the rules from `data/gitleaks_rules.json`, made from the TOML by
`scripts/build_secret_rules.py` (the JSON loads far faster than `tomllib` reads the TOML,
bench/RESULTS.md), and compiles a rule only when one of its keywords occurs in the text, as
gitleaks itself does. A text longer than 32 KiB is searched only around those keywords
(gitleaks' RE2 is linear; Python's backtracking `re` is not), and a match that reaches a
window's edge is matched again on the whole text, so no secret is cut short.

Followed as gitleaks does: the secret is the rule's `secretGroup`, else its first non-empty
group, else the whole match; a secret whose Shannon entropy is at or below the rule's floor is
dropped, and so is a `generic-*` secret without a digit; a finding matched by a rule's or the
global allowlist (regexes on the secret, match or line; stopwords in the secret) is dropped.
Left out, since redaction sees text and no file: rules that need a file path (`path`), and
allowlist entries that only name paths or commits.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data")
TOML_FILE = DATA / "gitleaks.toml"
RULES_FILE = DATA / "gitleaks_rules.json"

_FLAG_GROUP = re.compile(r"\(\?([imsU-]+)\)")
_POSIX = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "lower": "a-z",
    "upper": "A-Z",
    "space": r"\t\n\v\f\r ",
    "xdigit": "0-9A-Fa-f",
    "word": r"\w",
    "punct": r"!-/:-@\[-`{-~",
}
_CLASS_ESCAPE = frozenset("[&~|")
# `(?i)[\w.-]{0,50}?` in front of a rule only widens the match to the variable's name; a
# search finds the same secrets without it, and far faster in a backtracking engine.
_LEADING_NAME = re.compile(r"^((?:\(\?[a-z]+\))?)\[\\w\.-\]\{0,\d+\}\?")


def translate(go: str) -> str:
    """A Go (RE2) regex in Python `re` syntax with the same meaning."""
    out: list[str] = []
    scoped: list[list[str]] = [[]]  # flag groups opened inside each open group
    i, n = 0, len(go)
    while i < n:
        ch = go[i]
        if ch == "\\":
            out.append(r"\Z" if go[i + 1 : i + 2] == "z" else go[i : i + 2])
            i += 2
        elif ch == "[":
            i = _copy_class(go, i, out)
        elif ch == "(":
            flags = _FLAG_GROUP.match(go, i)
            if flags and i == 0:
                out.append(flags.group())
                i = flags.end()
            elif flags:
                out.append(f"(?{flags.group(1)}:")
                scoped[-1].append(flags.group(1))
                i = flags.end()
            else:
                out.append("(")
                scoped.append([])
                i += 1
        elif ch == ")":
            out.append(")" * len(scoped.pop()) + ")")
            i += 1
        elif ch == "|":
            opened = scoped[-1]
            out.append(")" * len(opened) + "|" + "".join(f"(?{f}:" for f in opened))
            i += 1
        else:
            out.append(ch)
            i += 1
    out.append(")" * len(scoped[0]))
    return "".join(out)


def _copy_class(go: str, i: int, out: list[str]) -> int:
    """Copy the character class starting at `go[i]`; return the index after it."""
    out.append("[")
    i += 1
    if go[i : i + 1] == "^":
        out.append("^")
        i += 1
    first = True
    while i < len(go):
        ch = go[i]
        if ch == "]" and not first:
            out.append("]")
            return i + 1
        first = False
        if ch == "\\":
            out.append(go[i : i + 2])
            i += 2
        elif ch == "[" and go[i + 1 : i + 2] == ":":
            end = go.index(":]", i + 2)
            out.append(_POSIX[go[i + 2 : end]])
            i = end + 2
        elif ch in _CLASS_ESCAPE or (ch == "]" and first):
            out.append("\\" + ch)
            i += 1
        else:
            out.append(ch)
            i += 1
    raise ValueError(f"unterminated character class in {go!r}")


def shannon_entropy(text: str) -> float:
    """Bits per character of `text` (0 for an empty string)."""
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


class Allowlist:
    """What makes a finding not a secret (gitleaks `[[rules.allowlists]]`), compiled on use."""

    __slots__ = ("_regexes", "all_of", "sources", "stopwords", "target", "usable")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.sources: tuple[str, ...] = tuple(raw.get("regexes", ()))
        self.target: str = raw.get("target", "secret")  # or "match", "line"
        self.stopwords: tuple[str, ...] = tuple(raw.get("stopwords", ()))
        self.all_of: bool = raw.get("all_of", False)  # condition = "AND"
        self.usable: bool = raw.get("usable", True)  # False: it needs a path or a commit
        self._regexes: tuple[re.Pattern[str], ...] | None = None

    def allows(self, secret: str, match: str, line: str) -> bool:
        if not self.usable:
            return False
        if self._regexes is None:
            self._regexes = tuple(re.compile(r, re.ASCII) for r in self.sources)
        text = {"secret": secret, "match": match, "line": line}[self.target]
        checks: list[bool] = []
        if self._regexes:
            checks.append(any(r.search(text) for r in self._regexes))
        if self.stopwords:
            lowered = secret.lower()
            checks.append(any(w in lowered for w in self.stopwords))
        if not checks:
            return False
        return all(checks) if self.all_of else any(checks)


class Rule:
    """One gitleaks rule, compiled on first use."""

    __slots__ = ("_pattern", "allowlists", "entropy", "id", "keywords", "secret_group", "source")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.id: str = raw["id"]
        self.source: str = raw["regex"]
        self.keywords: tuple[str, ...] = tuple(raw["keywords"])
        self.entropy: float = raw.get("entropy", 0.0)
        self.secret_group: int = raw.get("secret_group", 0)
        self.allowlists = tuple(Allowlist(a) for a in raw.get("allowlists", ()))
        self._pattern: re.Pattern[str] | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        if self._pattern is None:
            self._pattern = re.compile(self.source, re.ASCII)
        return self._pattern

    def secret_span(self, match: re.Match[str]) -> tuple[int, int]:
        if self.secret_group and self.secret_group <= match.re.groups:
            return match.span(self.secret_group)
        for index in range(1, match.re.groups + 1):
            start, end = match.span(index)
            if end > start:
                return start, end
        return match.span()

    def accepts(self, secret: str) -> bool:
        if not self.entropy:
            return True
        if shannon_entropy(secret) <= self.entropy:
            return False
        return not self.id.startswith("generic") or any(ch.isdigit() for ch in secret)


class RuleSet:
    """The rules, the global allowlist, and which rules each keyword wakes."""

    __slots__ = ("allowlist", "by_keyword", "by_trigram", "order", "rules", "starts")

    def __init__(self, rules: list[Rule], allowlist: Allowlist) -> None:
        self.rules = rules
        self.allowlist = allowlist
        self.order = {rule.id: i for i, rule in enumerate(rules)}
        self.by_keyword: dict[str, list[Rule]] = {}
        for rule in rules:
            for keyword in rule.keywords or ("",):
                self.by_keyword.setdefault(keyword, []).append(rule)
        # Keywords by their first three characters: a text's trigrams rule out most of the
        # 241 keywords with one set lookup each, where a substring search each took longer
        # than the rest of `redact` on a short memory (a sync import redacts every one).
        # Trigrams as tuples of characters, which `zip` makes in C, looked up in a frozenset
        # (`starts`): a third of the time of sliced strings intersected with the dict.
        self.by_trigram: dict[tuple[str, ...], list[str]] = {}
        for keyword in self.by_keyword:
            trigram = tuple(keyword[:3]) if len(keyword) >= 3 else ()
            self.by_trigram.setdefault(trigram, []).append(keyword)
        self.starts = frozenset(self.by_trigram)

    def find(self, text: str, lowered: str | None = None) -> Iterator[tuple[int, int, str]]:
        """(start, end, rule id) of each secret in `text` (`lowered`: `text.lower()`, when
        the caller has it)."""
        if lowered is None:
            lowered = text.lower()
        if len(lowered) != len(text):  # a few non-ASCII letters change length when lowered
            lowered = text.translate(_ASCII_LOWER)
        woken: dict[str, Rule] = {}
        # Only the text's trigrams some keyword starts with (a set intersection, in C). The
        # set's order is hash-seeded, so the woken rules run in the config's order: where two
        # rules find one span, the same rule names it in every process.
        trigrams = self.starts.intersection(zip(lowered, lowered[1:], lowered[2:], strict=False))
        by_trigram = self.by_trigram
        for trigram in (*trigrams, ()):  # (): keywords shorter than three characters
            for keyword in by_trigram.get(trigram, ()):
                if keyword in lowered:
                    for rule in self.by_keyword[keyword]:
                        woken.setdefault(rule.id, rule)
        for rule in sorted(woken.values(), key=lambda rule: self.order[rule.id]):
            yield from self._run(rule, text, lowered)

    def _run(self, rule: Rule, text: str, lowered: str) -> Iterator[tuple[int, int, str]]:
        for start, end in _windows(rule.keywords, text, lowered):
            pattern = rule.pattern
            for match in pattern.finditer(text, start, end):
                if match.end() >= end - _MARGIN and end < len(text):
                    # The window may have cut this match short: match it again, uncut.
                    whole = pattern.match(text, match.start())
                    match = whole if whole is not None else match
                s, e = rule.secret_span(match)
                secret = text[s:e]
                if not secret or not rule.accepts(secret):
                    continue
                line_start = text.rfind("\n", 0, match.start()) + 1
                line_end = text.find("\n", match.end())
                line = text[line_start : len(text) if line_end == -1 else line_end]
                lists = (self.allowlist, *rule.allowlists)
                if any(a.allows(secret, match.group(), line) for a in lists):
                    continue
                yield s, e, rule.id


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_SMALL = 32_768
_BEFORE = 256
_AFTER = 8_192
_MARGIN = 512


def _windows(keywords: tuple[str, ...], text: str, lowered: str) -> list[tuple[int, int]]:
    """Where to run a rule: the whole of a short text, else around each keyword in it."""
    if len(text) <= _SMALL:
        return [(0, len(text))]
    spans: list[tuple[int, int]] = []
    for keyword in keywords:
        at = lowered.find(keyword)
        while at != -1:
            spans.append((max(0, at - _BEFORE), min(len(text), at + len(keyword) + _AFTER)))
            at = lowered.find(keyword, at + 1)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def compile_config(config: dict[str, Any]) -> dict[str, Any]:
    """A gitleaks config (parsed TOML) as the JSON this module loads: regexes translated, rules
    that need a file path left out, allowlists reduced to what can match text."""
    rules: list[dict[str, Any]] = []
    for raw in config.get("rules", []):
        if "regex" not in raw or "path" in raw:
            continue
        rule: dict[str, Any] = {
            "id": raw["id"],
            "regex": _LEADING_NAME.sub(r"\1", translate(raw["regex"])),
            "keywords": sorted({k.lower() for k in raw.get("keywords", [])}),
        }
        if raw.get("entropy"):
            rule["entropy"] = float(raw["entropy"])
        if raw.get("secretGroup"):
            rule["secret_group"] = int(raw["secretGroup"])
        allowlists = [_compile_allowlist(a) for a in raw.get("allowlists", [])]
        if allowlists:
            rule["allowlists"] = allowlists
        rules.append(rule)
    return {
        "title": config.get("title", ""),
        "allowlist": _compile_allowlist(config.get("allowlist", {})),
        "rules": rules,
    }


def _compile_allowlist(raw: dict[str, Any]) -> dict[str, Any]:
    all_of = str(raw.get("condition", "OR")).upper() == "AND"
    out: dict[str, Any] = {
        "regexes": [translate(str(r)) for r in raw.get("regexes", [])],
        "target": str(raw.get("regexTarget", "secret")),
        "stopwords": sorted({str(s).lower() for s in raw.get("stopwords", [])}),
    }
    if all_of:
        out["all_of"] = True
        # Paths and commits never match text; under AND they make the whole entry unmatchable.
        if raw.get("paths") or raw.get("commits"):
            out["usable"] = False
    return out


def load_toml(path: Path = TOML_FILE) -> dict[str, Any]:
    """Build time and tests: the JSON form of a gitleaks TOML config (`tomllib` is slow to
    import and parse, so the hook reads the JSON instead)."""
    import tomllib

    with path.open("rb") as handle:
        return compile_config(tomllib.load(handle))


def load(path: Path = RULES_FILE) -> RuleSet:
    """The rule set in a JSON file written by `scripts/build_secret_rules.py`."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return RuleSet([Rule(raw) for raw in data["rules"]], Allowlist(data["allowlist"]))


_RULES: RuleSet | None = None


def rules() -> RuleSet:
    """The shipped rule set, loaded once per process."""
    global _RULES
    if _RULES is None:
        _RULES = load()
    return _RULES
