"""Secret redaction, applied to every text memoryd stores: each memory recorded (CLI, HTTP,
MCP, import: `MemoryService` redacts title, body, tags and triggers) and everything capture
writes (memory, journal, failed payload, log).

Each layer finds spans in the original text; overlapping spans are merged and each is replaced
by `[REDACTED:<kind>]`, so no rule can leave part of a secret that another rule found.

1. **Provider formats: gitleaks' rule set**, shipped as data (`gitleaks.py` says why gitleaks
   and not `detect-secrets`): ~220 maintained rules, from AWS, GitHub and Slack to Doppler,
   Vault and Linear. The kind is the rule's id (`[REDACTED:github-pat]`).
2. **Structure no provider rule reads**: PEM private-key blocks, even cut off before their END
   line; the password of a URL (`postgres://user:[REDACTED:password]@host`) or of
   `curl -u user:pass`, and a URL's user part when it is a long token (a Sentry DSN); bearer and
   `Authorization:` values; the AWS secret access key after its name, with `=`, `:` or only a
   space between; the value of any assignment whose name says it is secret (`password=`,
   `passwd:`, `DB_SECRET=`, `"api_key": "…"`, `token=`) and of such command-line flags
   (`--password X`, `--token=X`, `mysql -pX`, `sshpass -p X`). Where the value can only be a
   literal (a `.env` or shell line, YAML, a quoted string, a flag, an HTTP header, a query or
   connection string) it is hidden whatever its letters (`PASSWORD=CorrectHorseBatteryStaple`,
   a YAML passphrase to the end of its line) unless it is a placeholder or a reference
   (`changeme`, `<…>`, `${…}`, `$VAR`, `xxx`, `REDACTED`, `os.environ[…]`, `vault:…`); in code
   (`password = user_password`) a plain identifier is a variable unless it looks random.
   gitleaks' `generic-api-key` cannot do this: it drops letters-only values on purpose (an
   allowlist of `^[a-zA-Z_.-]+$`, and a digit required).
3. **High entropy**: a token of 20+ characters drawn from the base64 alphabet (with `/` and
   `+`, so `wJalrXUtnFEMI/K7MDENG/…` is one token, not three short ones) that mixes upper case,
   lower case and digits (below 32 characters, digits in two places at least: one number in a
   name is not enough), switches character class often (CamelCase identifiers and paths do
   not), and whose Shannon entropy reaches what 99.5% of random base62 strings of its length
   reach (`_ENTROPY_FLOOR`, found by simulation: 3.56 bits per character at 20 characters,
   4.15 at 32, 4.84 at 64). Content that only looks random is kept: data URIs (`;base64,…`),
   subresource integrity and Go module hashes (`sha512-…`, `h1:…`), SSH public keys.

A value found once is hidden wherever else it appears bare. Redacting is idempotent: no rule
reads into an earlier `[REDACTED:…]` mark, so a stored text redacted again is unchanged
(`fields.py` redacts every field of a memory at every write). **Hex is not redacted by
entropy**: git SHAs, content hashes and UUIDs fill coding sessions and are not secrets, so a
token made only of hex digits and dashes is left alone unless a rule or a name says it is
secret (`token=0123abcd…`). A hex-only secret quoted bare in prose is therefore kept — the
price of keeping SHAs, which a memory of a coding session needs.

`redact` also drops control characters (NUL, other C0 controls but tab, newline and carriage
return, DEL, C1) and terminal escape sequences: they have no place in a stored text, and a NUL
or an escape sequence in a memory file breaks the tools that read it.

`bench/redaction.py` measures it on `tests/data/secrets/` (bench/RESULTS.md).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from memoryd.redact import gitleaks
from memoryd.redact.lazy import LazyPattern as _Lazy

MARK = "[REDACTED:{}]"

KINDS = (
    "private_key",
    "password",
    "url_credential",
    "aws_secret_key",
    "bearer_token",
    "auth_header",
    "secret",
    "high_entropy",
)
"""The kinds of this module's own rules; gitleaks' rule ids are kinds too."""

_SECRET_NAME = (
    r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|credentials?|auth[_-]?key|(?:app|client|signing|encryption|master)[_-]?key"
    r"|(?<![A-Za-z0-9])pass(?![A-Za-z0-9_]))"  # `DB_PASS=`, `&pass=`; not `bypass`, `pass_count`
)

# (kind, pattern, group to replace — 0 for the whole match)
_FORMATS: list[tuple[str, _Lazy, int]] = [
    (
        "private_key",
        _Lazy(
            r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
            r".*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        0,
    ),
    (
        "password",
        _Lazy(r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@'\"\\]*:([^\s/'\"\\]+)@"),
        1,
    ),
    (
        "url_credential",
        _Lazy(r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://([A-Za-z0-9_~-]{16,})@"),
        1,
    ),
    (
        "password",
        _Lazy(r"(?<![\w-])(?:-u|--user)(?:=|[ \t]*)['\"]?[^\s:'\"@-][^\s:'\"@]*:([^\s'\"]+)"),
        1,
    ),
    (
        "aws_secret_key",
        _Lazy(
            r"(?i:aws.{0,24}?(?:secret|key).{0,24}?(?:[=:]|\s)\s*\\?[\"']?)"
            r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        1,
    ),
    ("bearer_token", _Lazy(r"(?i:\bbearer)\s+([A-Za-z0-9._~+/-]{12,}=*)"), 1),
    (
        "auth_header",
        _Lazy(
            r"(?i:authorization\\?[\"']?\s*[:=]\s*\\?[\"']?(?:basic|token|bearer)?\s*)"
            r"([A-Za-z0-9._~+/-]{8,}+=*)(?![(\[])"  # not `request.headers.get(…)`
        ),
        1,
    ),
]

# What each of `_FORMATS` needs in the (lowered) text, in the same order.
_FORMAT_HINTS = ("private key", "://", "://", "-u", "aws", "bearer", "authorization")
# Every `_SECRET_NAME` holds one of these; `_MYSQL_P` needs one of the commands.
_NAME_WORDS = ("pass", "pwd", "secret", "token", "key", "credential")
_MYSQL_WORDS = ("mysql", "mariadb", "sshpass")

_ASSIGNMENT = _Lazy(
    # The name starts where a word does and is bounded: a 16 KB token once took 24 s here.
    r"(?P<key>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]{0,64}?" + _SECRET_NAME + r"[A-Za-z0-9_.-]{0,64})"
    r"\\?[\"']?[ \t]*(?::=|=>|=|:)[ \t]*"
    r"(?:\\?\"(?P<dq>[^\"\\\n]{1,256})\\?\"|\\?'(?P<sq>[^'\\\n]{1,256})\\?'"
    r"|(?P<bare>[^\s\"'`,;)}\]\\]{1,256}))",
    re.IGNORECASE,
)

_FLAG = _Lazy(
    r"(?<![\w-])(?P<key>--?(?:password|passwd|pass|pwd|token|api[-_]?key|secret|client[-_]secret))"
    r"(?:=|[ \t]+)"
    r"(?:\\?\"(?P<dq>[^\"\\\n]{1,256})\\?\"|\\?'(?P<sq>[^'\\\n]{1,256})\\?'"
    r"|(?P<bare>[^\s\"'`,;)}\]\\-][^\s\"'`,;)}\]\\]{0,255}))",
    re.IGNORECASE,
)

# `mysql -pSECRET` (the password glued to `-p`) and `sshpass -p SECRET`; a bare `-p` is a
# port, a path or a patch elsewhere, so only these commands are read.
_MYSQL_P = _Lazy(
    r"(?:\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n|;&]*?[ \t](?P<key>-p)"
    r"|\bsshpass[ \t]+(?P<key2>-p)[ \t]+)"
    r"(?:\\?\"(?P<dq>[^\"\\\n]{1,256})\\?\"|\\?'(?P<sq>[^'\\\n]{1,256})\\?'"
    r"|(?P<bare>[^\s\"'`,;)}\]\\-][^\s\"'`,;)}\]\\]{0,255}))"
)

# Values that name a secret rather than hold one: types, references, placeholders.
_NOT_A_VALUE = _Lazy(
    r"(?ix)^(?:str|string|bytes|int|bool|none|null|nil|true|false|undefined|optional.*"
    r"|secretstr|\$.*|<.*|%.*|\{.*|\[redacted.*|\*+|x+|\.\.\.|…"
    r"|await|new|function|lambda|yield|async|typeof|require|import|return"  # code, not a value
    r"|change[-_]?me|changeit|placeholder|example.*|sample.*|dummy.*|fake.*|your[-_].*"
    r"|.*[-_]here|redacted|hidden|todo|tbd|fixme|test|testing|foobar|default|required|unset"
    r"|n/a|empty|secrets?\..*|vault:.*|(?:password|passwd|secret|token|pass)"  # placeholders
    r"|(?:self|cls|os|env|config|settings|args|opts|options|process|ctx|request|this)[.\[].*"
    r"|.*\(.*|[A-Za-z_][\w.]*\[.*)$"  # a call, a subscript or a generic type
)
_COUNT_NAME = _Lazy(r"(?i)tokens\b|tokens_|token_?(?:count|usage|limit|budget|ids?)\b")

_SECRET_KEY = _Lazy(r"[A-Za-z0-9_.-]*" + _SECRET_NAME + r"[A-Za-z0-9_.-]*", re.IGNORECASE)
_TOKEN = _Lazy(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{20,}={0,2}(?![A-Za-z0-9+/=_-])")
# What precedes content that only looks random: a data URI's payload, a Go module hash, an
# SSH public key.
_CONTENT_PREFIX = _Lazy(r"(?:;base64,|\bh1:|\b(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp\d+) )$")
_CONTENT_TOKEN = _Lazy(r"sha(?:1|256|384|512)-", re.IGNORECASE)  # an SRI hash
_DIGIT_RUN = _Lazy(r"[0-9]+")
_HEX_ONLY = _Lazy(r"[0-9a-fA-F-]+=*")
_PLAIN_IDENTIFIER = _Lazy(r"[A-Za-z_][A-Za-z_.-]*")
_IDENTIFIER_PARTS = _Lazy(r"[_.\-\s]+|(?<=[a-z0-9])(?=[A-Z])")
_NAMED_PART = _Lazy(r"_" + _SECRET_NAME + r"_", re.IGNORECASE)


shannon_entropy = gitleaks.shannon_entropy


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
    # `map` over the str methods: a generator per token cost more than the rest of a redact.
    if not any(map(str.isdigit, token)) or not any(map(str.isupper, token)):
        return False
    if not any(map(str.islower, token)):
        return False
    if n < 32 and len(_DIGIT_RUN.findall(token)) < 2:
        return False  # `sizeEndCentDir64Locator`: one number in a name
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


def _secret_value(key: str, value: str, *, literal: bool = False) -> bool:
    """Whether `value`, found after the secret-named `key`, is a secret to hide.

    `literal`: where it stands, the value can only be a literal string (a `.env` or shell
    line, YAML, a quoted string, a command-line flag, a header, a query string): then any
    value is a secret, letters only or a passphrase, but a placeholder or a reference. In
    code (`password = user_password`) a plain identifier is a variable, unless random."""
    if len(value) < 4 or _NOT_A_VALUE.match(value) or _COUNT_NAME.search(key):
        return False
    lowered_key = key.lower()
    if value.isdigit() and not _DIGITS_KEY.search(lowered_key):
        return False  # `PASSWORD_MIN_LENGTH=12`, `password_reset_timeout: 3600`
    if lowered_key.lstrip("-") in _NOT_SECRET_KEYS or value.lower() in _PROSE_WORDS:
        return False
    if literal:
        parts = [w.lower() for w in _IDENTIFIER_PARTS.split(value) if w]
        named = _PLAIN_IDENTIFIER.fullmatch(value) and _NAMED_PART.search(
            "_" + "_".join(parts) + "_"
        )
        return not named and value.lower() != lowered_key.rsplit("_", 1)[-1]
    # `password=user_password`, `token=accessToken`, `credentials = in_memory`: a variable,
    # not its value. Only a plain identifier (letters, `_`, `.`, `-`) counts, and only when its
    # words include the name or it is made of several real words: `hdcjvspwdgrk` and
    # `Pa55-OMMB27rnxPWD` hold "pwd" by chance, and a leaked secret costs more than a hidden
    # variable name.
    if not _PLAIN_IDENTIFIER.fullmatch(value):
        return True
    parts = [w.lower() for w in _IDENTIFIER_PARTS.split(value) if w]
    words = "_" + "_".join(parts) + "_"
    several_words = len(parts) >= 2 and min(map(len, parts)) >= 2
    if several_words and sum(map(len, parts)) / len(parts) >= 3:
        return looks_random(value)
    return not _NAMED_PART.search(words) or looks_random(value)


# A number is a secret only as the value of a name that ends in a password or a PIN.
_DIGITS_KEY = _Lazy(r"(?:pass(?:word|wd|code|phrase)?|pwd|secret|pin)$")
_NOT_SECRET_KEYS = frozenset({"pwd", "oldpwd"})  # the shell's working directories
# Words that follow a flag or a name in prose ("run it with --password and it prompts").
_PROSE_WORDS = frozenset({
    "with", "from", "instead", "option", "flag", "value", "argument", "file", "only", "when",
    "then", "which", "that", "this", "here", "there", "before", "after", "also", "will",
    "must", "should", "into", "onto", "were", "have", "your", "their", "prompt", "prompts",
    "first", "later",
})  # fmt: skip
# Where a value can only be a literal: the start of a line (after `export`, `set`, `ENV`,
# a YAML list dash), a query string or a connection string (`?`, `&`, `;`).
_LINE_START = _Lazy(r"(?:^|\n)[ \t]*(?:-[ \t]+)?(?:(?:export|set|ENV|env)[ \t]+)?\Z")
_UPPER_KEY = _Lazy(r"[A-Z][A-Z0-9_.]*")
_HEADER_KEY = _Lazy(r"[A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)+")
_DOTTED = _Lazy(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+")
# What may follow a literal line's value: more words (a passphrase), a comment.
_REST_WORDS = _Lazy(r"(?:[ \t]+[\w'!?.@%+-]+)+(?=[ \t]*(?:[ \t]#.*)?$)", re.MULTILINE)
_REST_CODE = _Lazy(r"[^\n]*[,;{}()\[\]][ \t]*$", re.MULTILINE)

_MARK = _Lazy(r"\[REDACTED:[A-Za-z0-9_.-]*\]")
_PUNCTUATION = " \t:=@/[]()\"'"

_CONTROL = _Lazy(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)


def drop_controls(text: str) -> str:
    """`text` without control characters but tab, newline and carriage return, and without
    terminal escape sequences (an escape sequence goes whole, not only its ESC)."""
    return _CONTROL.sub("", text)


class _Found:
    """The spans of one text to hide, and the values they hold (hidden wherever they recur)."""

    __slots__ = ("marks", "spans", "text", "values")

    def __init__(self, text: str) -> None:
        self.text = text
        self.spans: list[tuple[int, int, str]] = []
        self.values: dict[str, str] = {}
        # The marks of an earlier redaction: no rule reads into them, so redacting a
        # redacted text changes nothing (`https://[REDACTED:github-pat]@host` is no URL
        # password), and a stored text redacted again on a rewrite stays as it is.
        self.marks = [m.span() for m in _MARK.finditer(text)] if "[REDACTED:" in text else []

    def add(self, start: int, end: int, kind: str) -> None:
        for mark_start, mark_end in self.marks:
            if mark_start < end and start < mark_end:  # overlaps: keep what is outside it
                if start >= mark_start:
                    start = mark_end
                if end <= mark_end:
                    end = mark_start
        if end > start and self.text[start:end].strip(_PUNCTUATION):
            self.spans.append((start, end, kind))
            self.values.setdefault(self.text[start:end], kind)

    def group(self, match: re.Match[str], group: int | str, kind: str) -> None:
        self.add(*match.span(group), kind)

    def assignment(self, match: re.Match[str], *, flag: bool = False) -> None:
        name = "dq" if match.group("dq") is not None else "sq" if match.group("sq") else "bare"
        value = match.group(name)
        if value is None:
            return
        key = match.group("key") or match.groupdict().get("key2") or ""
        start, end = match.span(name)
        line_start = False
        if flag or name != "bare":
            literal = True
        elif _DOTTED.fullmatch(value):
            literal = False  # `cfg.api_key`, `process.env.TOKEN`: a reference
        else:
            literal, line_start = self._literal(match, key)
        if not _secret_value(key, value, literal=literal):
            return
        if line_start:  # `password: correct horse battery staple` holds every word
            rest = _REST_WORDS.match(self.text, end)
            if rest is not None:
                end = rest.end()
        self.add(start, end, "secret")

    def _literal(self, match: re.Match[str], key: str) -> tuple[bool, bool]:
        """Whether a bare value stands where only a literal can (and at a line's start)."""
        text, at = self.text, match.start("key")
        before = text[at - 1] if at else "\n"
        separator = text[match.end("key") : match.start("bare")]
        if before in "?&;":
            return True, False
        if _HEADER_KEY.fullmatch(key) and ":" in separator:
            return True, False  # an HTTP header: `X-Api-Key: …`
        at_line_start = _LINE_START.search(text, max(0, at - 16), at) is not None
        if at_line_start and _REST_CODE.match(text, match.end("bare")) is None:
            # YAML (`password: …`) and `.env`/shell lines (`PASSWORD=…`, no spaces)
            yaml = ":" in separator
            env = separator == "=" and bool(_UPPER_KEY.fullmatch(key))
            if yaml or env:
                return True, True
        if _UPPER_KEY.fullmatch(key) and "=" in separator and before != ".":
            return True, False  # `export API_TOKEN=…`, `ENV SECRET_KEY …` mid-line
        return False, False

    def random(self, match: re.Match[str]) -> None:
        token = match.group()
        start = match.start() + len(token) - len(token.lstrip("/+"))
        token = token.strip("/+")  # `//` before a host, `/` after a path: not the token's
        if (
            looks_random(token)
            and not _CONTENT_TOKEN.match(token)
            and not _CONTENT_PREFIX.search(self.text, max(0, match.start() - 24), match.start())
        ):
            self.add(start, start + len(token), "high_entropy")

    def hidden(self) -> str:
        """The text with every span, and every bare copy of a found value, replaced."""
        text = self.text
        for value, kind in self.values.items():
            if len(value) < 8:
                continue
            at = text.find(value)
            while at != -1:
                self.spans.append((at, at + len(value), kind))
                at = text.find(value, at + len(value))
        self.spans.sort(key=lambda span: (span[0], -span[1]))
        out: list[str] = []
        kind, end = "", 0  # the span being built (none yet while kind is "")
        for at, stop, found in self.spans:
            if kind and at < end:  # overlaps the span being built: widen it
                end = max(end, stop)
                kind = min(kind, found, key=_vagueness)  # named by the most telling kind
                continue
            if kind:
                out.append(MARK.format(kind))
            out.append(text[end:at])
            kind, end = found, stop
        out.append(MARK.format(kind) + text[end:])
        return "".join(out)


def _vagueness(kind: str) -> int:
    """Provider formats tell most, then this module's structures, then names, then entropy."""
    if kind == "high_entropy":
        return 3
    if kind == "secret" or kind.startswith("generic"):
        return 2
    return 1 if kind in KINDS else 0


def redact(text: str, *, high_entropy: bool = True) -> str:
    """`text` with every secret replaced by `[REDACTED:<kind>]`, and without control
    characters (`drop_controls`)."""
    if not text:
        return text
    if not text.isprintable():  # a printable text holds no control character (`isprintable`
        text = drop_controls(text)  # is a C loop; the substitution a regex scan)
    found = _Found(text)
    # Each rule runs only when the word it needs is in the text: most texts hold none.
    lowered = text.lower()
    for (kind, pattern, group), hint in zip(_FORMATS, _FORMAT_HINTS, strict=True):
        if hint in lowered:
            for match in pattern.finditer(text):
                found.group(match, group, kind)
    for start, end, rule_id in gitleaks.rules().find(text, lowered):
        found.add(start, end, rule_id)
    if any(word in lowered for word in _NAME_WORDS):
        for match in _ASSIGNMENT.finditer(text):
            found.assignment(match)
        for match in _FLAG.finditer(text):
            found.assignment(match, flag=True)
    if any(word in lowered for word in _MYSQL_WORDS):
        for match in _MYSQL_P.finditer(text):
            found.assignment(match, flag=True)
    # A random token has an upper-case letter (`looks_random`), and tokens are ASCII: a text
    # `lower` leaves as it is holds none (slugs, entity ids, tags: most of an import's texts).
    if high_entropy and text != lowered:
        for match in _TOKEN.finditer(text):
            found.random(match)
    return found.hidden() if found.spans else text


def redact_json(value: Any, *, high_entropy: bool = True, key: str = "") -> Any:
    """A JSON value with every string redacted; a string under a secret-sounding key is hidden."""
    if isinstance(value, str):
        if key and _SECRET_KEY.fullmatch(key) and _secret_value(key, value, literal=True):
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


def _markers() -> list[str]:
    kinds = (*KINDS, *(rule.id for rule in gitleaks.rules().rules))
    return [MARK.format(kind) for kind in kinds]


def _unsplit_marker(kept: str, *, from_end: bool) -> str:
    """Drop a `[REDACTED:…]` marker that the cut left half-written."""
    if from_end:
        cut = _MARKER_TAIL.match(kept)
        if cut and any(m.endswith(cut.group()) for m in _markers()):
            return kept[cut.end() :]
        return kept
    opening = kept.rfind("[")
    if opening != -1 and any(m.startswith(kept[opening:]) for m in _markers()):
        return kept[:opening]
    return kept


_MARKER_TAIL = _Lazy(r"[A-Z]{0,8}:?[a-z0-9_-]*\]")


def safe_cut(text: str, limit: int, *, high_entropy: bool = True) -> str:
    """`text` cut to `limit` characters (plus `…`), redacted first when it has to be cut.

    Text that fits is returned as is: the caller redacts the whole document it goes into.
    """
    if len(text) <= limit:
        return text
    return _window(text, limit, from_end=False, high_entropy=high_entropy).rstrip() + "…"


_MARK_KIND = _Lazy(r"\[REDACTED:([A-Za-z0-9_.-]*)\]")
_NOT_SLUG = _Lazy(r"[^0-9A-Za-z._-]+")


def clean_slug(slug: str) -> str:
    """`slug` (a slug, a session id: something that names a file) without the secrets it
    holds: each becomes `redacted-<kind>`; one with none is returned as it is. A function of
    the slug alone, so every reference to a slug is renamed the same way.

    Its dash-separated words are redacted first, so the rest of the slug stays (a whole
    slug is one long token to the entropy rule); then the whole, for a secret with dashes."""
    spaced = slug.replace("-", " ")
    out = redact(spaced)
    out = _as_slug(out) if out != spaced else slug
    whole = redact(out)
    return _as_slug(whole) if whole != out else out


def _as_slug(text: str) -> str:
    out = _MARK_KIND.sub(lambda m: "redacted-" + m.group(1).replace("_", "-"), text)
    return _NOT_SLUG.sub("-", out).strip("-._") or "redacted"
