"""Secret redaction, applied to every text capture writes: memory, journal, failed payload, log.

Two layers:

1. **Known formats** (`KINDS`): provider keys by their published prefixes (Anthropic, OpenAI,
   AWS, GitHub, GitLab, Slack, Google, Stripe, npm, Hugging Face, SendGrid), JWTs, bearer and
   `Authorization:` values, PEM private-key blocks, the password of a URL
   (`postgres://user:[REDACTED:password]@host`) or of `curl -u user:pass`, the value of any
   assignment whose name says it is secret (`password=`, `passwd:`, `DB_SECRET=`,
   `"api_key": "…"`, `token=`) and of such command-line flags (`--password X`, `--token=X`).
2. **High entropy**: a token of 20+ characters drawn from the base64 alphabet that mixes upper
   case, lower case and digits (at least two digits below 32 characters), switches character
   class often (CamelCase identifiers do not), and whose Shannon entropy reaches what 99.5% of
   random base62 strings of its length reach (`_ENTROPY_FLOOR`, measured by simulation: 3.56
   bits per character at 20 characters, 4.15 at 32, 4.84 at 64).

**Hex is not redacted by entropy**: git SHAs, content hashes and UUIDs fill coding sessions and
are not secrets, so a token made only of hex digits and dashes is left alone unless a name says
it is secret (`token=0123abcd…`). A hex-only secret quoted bare in prose is therefore kept — the
price of keeping SHAs, which a memory of a coding session needs.

Everything matched is replaced by `[REDACTED:<kind>]`.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

MARK = "[REDACTED:{}]"

KINDS = (
    "private_key",
    "password",
    "jwt",
    "anthropic_key",
    "openai_key",
    "stripe_key",
    "aws_access_key",
    "aws_secret_key",
    "github_token",
    "gitlab_token",
    "slack_token",
    "slack_webhook",
    "google_api_key",
    "npm_token",
    "huggingface_token",
    "sendgrid_key",
    "bearer_token",
    "auth_header",
    "secret",
    "high_entropy",
)

_SECRET_NAME = (
    r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|credentials?|auth[_-]?key)"
)

# (kind, pattern, group to replace — 0 for the whole match)
_FORMATS: list[tuple[str, re.Pattern[str], int]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
            r".*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        0,
    ),
    (
        "password",
        re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@'\"\\]*:([^\s/'\"\\]+)@"),
        1,
    ),
    (
        "password",
        re.compile(r"(?<![\w-])(?:-u|--user)(?:=|[ \t]*)['\"]?[^\s:'\"@-][^\s:'\"@]*:([^\s'\"]+)"),
        1,
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), 0),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}"), 0),
    ("openai_key", re.compile(r"\bsk-(?!ant-)[A-Za-z0-9_-]{20,}"), 0),
    (
        "stripe_key",
        re.compile(r"\b(?:[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,})"),
        0,
    ),
    (
        "aws_access_key",
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b"),
        0,
    ),
    (
        "aws_secret_key",
        re.compile(
            r"(?i:aws.{0,24}?(?:secret|key).{0,24}?[=:]\s*\\?[\"']?)"
            r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        1,
    ),
    (
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        0,
    ),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), 0),
    ("slack_token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"), 0),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"), 0),
    ("google_api_key", re.compile(r"\b(?:AIza[0-9A-Za-z_-]{35}|ya29\.[0-9A-Za-z_-]{20,})"), 0),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), 0),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), 0),
    ("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"), 0),
    ("bearer_token", re.compile(r"(?i:\bbearer)\s+([A-Za-z0-9._~+/-]{12,}=*)"), 1),
    (
        "auth_header",
        re.compile(
            r"(?i:authorization\\?[\"']?\s*[:=]\s*\\?[\"']?(?:basic|token|bearer)?\s*)"
            r"([A-Za-z0-9._~+/-]{8,}=*)"
        ),
        1,
    ),
]

_ASSIGNMENT = re.compile(
    r"(?P<key>[A-Za-z0-9_.-]*" + _SECRET_NAME + r"[A-Za-z0-9_.-]*)"
    r"\\?[\"']?[ \t]*(?::=|=>|=|:)[ \t]*"
    r"(?:\\?\"(?P<dq>[^\"\\\n]{1,256})\\?\"|\\?'(?P<sq>[^'\\\n]{1,256})\\?'"
    r"|(?P<bare>[^\s\"'`,;)}\]\\]{1,256}))",
    re.IGNORECASE,
)

_FLAG = re.compile(
    r"(?<![\w-])(?P<key>--?(?:password|passwd|pass|pwd|token|api[-_]?key|secret|client[-_]secret))"
    r"(?:=|[ \t]+)"
    r"(?:\\?\"(?P<dq>[^\"\\\n]{1,256})\\?\"|\\?'(?P<sq>[^'\\\n]{1,256})\\?'"
    r"|(?P<bare>[^\s\"'`,;)}\]\\-][^\s\"'`,;)}\]\\]{0,255}))",
    re.IGNORECASE,
)

# Values that name a secret rather than hold one: types, references, placeholders.
_NOT_A_VALUE = re.compile(
    r"(?ix)^(?:str|string|bytes|int|bool|none|null|nil|true|false|undefined|optional.*"
    r"|secretstr|\$.*|<.*|%.*|\{.*|\[redacted.*|\*+|x+|\.\.\.|…"
    r"|(?:self|cls|os|env|config|settings|args|opts|options|process|ctx|request|this)[.\[].*"
    r"|.*\(.*)$"
)
_COUNT_NAME = re.compile(r"(?i)tokens\b|tokens_|token_?(?:count|usage|limit|budget|ids?)\b")

_SECRET_KEY = re.compile(r"[A-Za-z0-9_.-]*" + _SECRET_NAME + r"[A-Za-z0-9_.-]*", re.IGNORECASE)
_TOKEN = re.compile(r"(?<![A-Za-z0-9+=_-])[A-Za-z0-9+=_-]{20,}(?![A-Za-z0-9+=_-])")
_HEX_ONLY = re.compile(r"[0-9a-fA-F-]+=*")
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_.]*")
_IDENTIFIER_PARTS = re.compile(r"[_.\-\s]+|(?<=[a-z0-9])(?=[A-Z])")
_NAMED_PART = re.compile(r"_" + _SECRET_NAME + r"_", re.IGNORECASE)


def shannon_entropy(text: str) -> float:
    """Bits per character of `text` (0 for an empty string)."""
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _class(ch: str) -> int:
    if ch.isdigit():
        return 0
    if ch.isupper():
        return 1
    if ch.islower():
        return 2
    return 3


def looks_random(token: str) -> bool:
    """Whether a 20+ character token looks like a generated secret (see the module docstring)."""
    n = len(token)
    if n < 20 or _HEX_ONLY.fullmatch(token):
        return False
    digits = sum(ch.isdigit() for ch in token)
    if digits == 0 or not any(ch.isupper() for ch in token):
        return False
    if not any(ch.islower() for ch in token):
        return False
    if digits < 2 and n < 32:
        return False
    switches = sum(_class(a) != _class(b) for a, b in itertools.pairwise(token))
    if switches / (n - 1) < 0.4:
        return False
    return shannon_entropy(token) >= entropy_floor(n)


# (length, bits per character) that 99.5% of random base62 strings of that length reach.
_ENTROPY_FLOOR = (
    (20, 3.56),
    (24, 3.80),
    (28, 3.99),
    (32, 4.15),
    (40, 4.39),
    (48, 4.58),
    (64, 4.84),
    (80, 5.03),
    (100, 5.20),
    (128, 5.35),
)


def entropy_floor(length: int) -> float:
    """The entropy a random token of `length` characters almost surely has (interpolated)."""
    if length >= _ENTROPY_FLOOR[-1][0]:
        return _ENTROPY_FLOOR[-1][1]
    for (n0, h0), (n1, h1) in itertools.pairwise(_ENTROPY_FLOOR):
        if length <= n1:
            return h0 + (h1 - h0) * (max(length, n0) - n0) / (n1 - n0)
    return _ENTROPY_FLOOR[-1][1]


def _secret_value(key: str, value: str) -> bool:
    if len(value) < 4 or _NOT_A_VALUE.match(value) or _COUNT_NAME.search(key):
        return False
    lowered_key = key.lower()
    if value.isdigit() and not re.search(r"pass|pwd|secret|pin", lowered_key):
        return False
    # `password=user_password`, `token=accessToken`: a variable, not its value. Only a plain
    # identifier (letters, `_` and `.`) whose words include the name counts: `hdcjvspwdgrk`
    # and `Pa55-OMMB27rnxPWD` hold "pwd" by chance, and a leaked secret costs more than a
    # hidden variable name.
    if not _PLAIN_IDENTIFIER.fullmatch(value):
        return True
    words = "_" + "_".join(w.lower() for w in _IDENTIFIER_PARTS.split(value)) + "_"
    return not _NAMED_PART.search(words) or looks_random(value)


class _Redactor:
    """One pass over a text; remembers what it hid so other bare copies are hidden too."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: dict[str, str] = {}

    def _hide(self, match: re.Match[str], group: int | str, kind: str) -> str:
        start, end = match.span(group)
        base = match.start()
        text = match.group(0)
        self.found.setdefault(text[start - base : end - base], kind)
        return text[: start - base] + MARK.format(kind) + text[end - base :]

    def group(self, kind: str, group: int) -> Callable[[re.Match[str]], str]:
        return lambda match: self._hide(match, group, kind)

    def assignment(self, match: re.Match[str]) -> str:
        name = "dq" if match.group("dq") is not None else "sq" if match.group("sq") else "bare"
        value = match.group(name)
        if value is None or not _secret_value(match.group("key"), value):
            return match.group(0)
        return self._hide(match, name, "secret")

    def random(self, match: re.Match[str]) -> str:
        return self._hide(match, 0, "high_entropy") if looks_random(match.group(0)) else match[0]

    def bare_copies(self, text: str) -> str:
        """A secret seen once with its label (`password=…`) is hidden where it appears bare."""
        for value in sorted(self.found, key=len, reverse=True):
            if len(value) >= 8 and value in text:
                text = text.replace(value, MARK.format(self.found[value]))
        return text


def redact(text: str, *, high_entropy: bool = True) -> str:
    """`text` with every secret replaced by `[REDACTED:<kind>]`."""
    if not text:
        return text
    run = _Redactor()
    for kind, pattern, group in _FORMATS:
        text = pattern.sub(run.group(kind, group), text)
    text = _ASSIGNMENT.sub(run.assignment, text)
    text = _FLAG.sub(run.assignment, text)
    if high_entropy:
        text = _TOKEN.sub(run.random, text)
    return run.bare_copies(text) if run.found else text


def redact_json(value: Any, *, high_entropy: bool = True, key: str = "") -> Any:
    """A JSON value with every string redacted; a string under a secret-sounding key is hidden."""
    if isinstance(value, str):
        if key and _SECRET_KEY.fullmatch(key) and _secret_value(key, value):
            return MARK.format("secret")
        return redact(value, high_entropy=high_entropy)
    if isinstance(value, dict):
        return {k: redact_json(v, high_entropy=high_entropy, key=str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_json(v, high_entropy=high_entropy) for v in value]
    return value


def redact_excerpt(text: str, head: int, tail: int = 0, *, high_entropy: bool = True) -> str:
    """At most `head` + `tail` characters of `text` (its start and end), redacted when cut.

    Redaction runs on a window wider than what is kept, widened until the kept part is far
    enough from the window's edge, so a secret cut by the window can never be half-kept. Text
    that fits is returned as is: the caller redacts the whole document it goes into.
    """
    if len(text) <= head + tail + 80:
        return text
    kept_head = _window(text, head, from_end=False, high_entropy=high_entropy)
    if tail <= 0:
        return f"{kept_head} … [{len(text) - head:,} more characters]"
    kept_tail = _window(text, tail, from_end=True, high_entropy=high_entropy)
    skipped = len(text) - head - tail
    return f"{kept_head}\n… [{skipped:,} characters skipped] …\n{kept_tail}"


_EDGE = 256


def _window(text: str, keep: int, *, from_end: bool, high_entropy: bool) -> str:
    margin = _EDGE * 2
    while True:
        size = keep + margin
        piece = text[-size:] if from_end else text[:size]
        hidden = redact(piece, high_entropy=high_entropy)
        if size >= len(text) or len(hidden) >= keep + _EDGE:
            break
        margin *= 2
    kept = hidden[-keep:] if from_end else hidden[:keep]
    return _unsplit_marker(kept, from_end=from_end)


def _unsplit_marker(kept: str, *, from_end: bool) -> str:
    """Drop a `[REDACTED:…]` marker that the cut left half-written."""
    markers = [MARK.format(kind) for kind in KINDS]
    if from_end:
        cut = _MARKER_TAIL.match(kept)
        if cut and any(m.endswith(cut.group()) for m in markers):
            return kept[cut.end() :]
        return kept
    opening = kept.rfind("[")
    if opening != -1 and any(m.startswith(kept[opening:]) for m in markers):
        return kept[:opening]
    return kept


_MARKER_TAIL = re.compile(r"[A-Z]{0,8}:?[a-z_]*\]")


def safe_cut(text: str, limit: int, *, high_entropy: bool = True) -> str:
    """`text` cut to `limit` characters (plus `…`), redacted first when it has to be cut.

    Text that fits is returned as is: the caller redacts the whole document it goes into.
    """
    if len(text) <= limit:
        return text
    return _window(text, limit, from_end=False, high_entropy=high_entropy).rstrip() + "…"
