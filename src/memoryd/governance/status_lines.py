"""Explicit record statuses: "Status: Superseded by ADR-0036", "Supersedes: 0004",
"Superseded by [12. Use Postgres](0012-use-postgres.md)", "Amended by …", "被 ADR-5 取代".

A decision record that says which record replaces it (or which it replaces) is the strongest
evidence supersede judging gets: it names both sides. This module reads those lines and the
names a record can be referred to by (its number, its file name, its title), and resolves a
line's references among the records of one scope. Pure text: the service feeds it the
scope's memories (`domain/superseding.py`).

"Amended by" / "Amends" is not a replacement: both records hold, one refines the other. It
resolves like the others and the service records it as a relation between the two memories
(`cites`, labelled `amends`), never a supersede.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Kind = Literal["supersedes", "superseded-by", "amends", "amended-by"]

STATUS_KEYWORDS = (
    r"(?i)supersed|replaced by|replaces|obsolete|deprecated|rejected|retired|amend|favou?r of"
    r"|until now|up to now|until recently|move on from|moving on from"
    r"|取代|替代|替换|废弃|修订"
)
"""A body that matches none of these has no status line (what the scope query filters on)."""

STATUS_WORDS = (
    "supersed",
    "replaced by",
    "replaces",
    "obsolete",
    "deprecated",
    "rejected",
    "retired",
    "amend",
    "favor of",
    "favour of",
    "until now",
    "up to now",
    "until recently",
    "move on from",
    "moving on from",
    "取代",
    "替代",
    "替换",
    "废弃",
    "修订",
)
"""`STATUS_KEYWORDS` as lower-case words: a body whose lower-cased text holds none of them, and
none of `FOLDED`, matches none of the keywords. The graph filters a scope's bodies on them
(its regular expression over every body cost 20 times as much) and Python's `re` decides."""
FOLDED = ("ſ", "ı", "İ")
"""Letters that case-insensitive matching takes for an s or an i, which lower-casing keeps."""


@dataclass(frozen=True)
class Ref:
    """How a status line names another record: by number, by title or file-name words."""

    number: int | None
    key: str | None
    """The title as slug words without its number (`use-postgres`), when the line gives it."""
    text: str


@dataclass(frozen=True)
class StatusLine:
    kind: Kind
    refs: tuple[Ref, ...]
    line: str
    """The line as written (trimmed): the evidence a decision quotes."""
    planned: bool = False
    """"We're looking to move on from this decision - see [021]": the named record planned
    the replacement; the record that replaced the plan (its own successor) carried it out."""


@dataclass(frozen=True)
class Record:
    """One memory of the scope, as references can find it."""

    slug: str
    title: str
    body: str = ""
    tags: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class Link:
    """A resolved status line: `newer` replaces (or amends) `older`; `said_by` wrote it."""

    newer: str
    older: str
    kind: Literal["supersedes", "amends"]
    said_by: str
    line: str
    planned: bool = False


# --------------------------------------------------------------------------- names


def title_key(text: str) -> str:
    """Slug words of a title or file name, without a leading record number, a date or an
    extension: "12. Use Postgres", "0012-use-postgres.md" and "ADR-0012: Use Postgres"
    all give `use-postgres`."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"\.(?:md|markdown|rst|txt|adoc|html?)\b", "", text, flags=re.I)
    text = _NUMBER_PREFIX.sub("", text.strip())
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)


_NUMBER_PREFIX = re.compile(
    r"^(?:(?:adr|rfc|dr|decision|record|mdr)[\s_#:-]*)?(?:\d{4}-\d{2}-\d{2}|\d{1,8})"
    r"(?:\s*[.:)_\-–—]+\s*|\s+|$)",
    re.IGNORECASE,
)
_NUMBER_OF = re.compile(
    r"^(?:(?:adr|rfc|dr|decision|record|mdr)[\s_#:-]*)?(\d{1,8})(?=\s*[.:)_\-–—\s]|$)",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^\s*#{1,3}\s+(.+)$", re.MULTILINE)
_GENERATED_SLUG = re.compile(r"^\d{4}-\d{2}-\d{2}-(.+?)(?:-[0-9a-f]{6})?$")


def strip_number(title: str) -> str:
    """A title without its record number, date or `ADR-12:` label ("33 Manager cluster"
    → "Manager cluster")."""
    return _NUMBER_PREFIX.sub("", title.strip()).strip()


def _number(text: str) -> int | None:
    m = _NUMBER_OF.match(text.strip())
    if m is None:
        return None
    value = int(m.group(1))
    return None if _is_date(m.group(1)) else value


def _is_date(digits: str) -> bool:
    """`20201016`: a date prefix (log4brains file names), not a record number."""
    return len(digits) == 8 and digits[:2] in ("19", "20")


def record_names(record: Record) -> tuple[set[int], set[str]]:
    """The numbers and title keys a record can be referred to by: from its title, its first
    heading, its slug, its tags and its source (an imported file's name)."""
    numbers: set[int] = set()
    keys: set[str] = set()
    texts = [record.title]
    heading = _HEADING.search(record.body[:600])
    if heading:
        texts.append(heading.group(1))
    generated = _GENERATED_SLUG.match(record.slug)
    texts.append(generated.group(1) if generated else record.slug)
    texts += [t for t in record.tags if re.match(r"(?i)^(?:adr|rfc|dr)?[-_ #]*\d", t)]
    if record.source:
        texts.append(re.split(r"[/\\]", record.source)[-1])
    for text in texts:
        number = _number(text)
        if number is not None:
            numbers.add(number)
        key = title_key(text)
        if key and len(key) >= 6 and not key.isdigit():
            keys.add(key)
    return numbers, keys


# --------------------------------------------------------------------------- lines

_SEP = r"[\s:：*_`\-–—>]*"
_REF = (
    r"\[[^\]\n]{1,200}\]\([^)\s]{1,300}\)"  # a markdown link
    r"|(?:adr|rfc|dr)[\s_#-]*\d{1,8}\b(?:\s*[:.\-–—]\s*[^,;\n\[\]()]{1,120})?"
    r"|#?\d{1,8}(?:-[\w-]+(?:\.md)?)?\b"
    r"|`[^`\n]{1,200}`|\"[^\"\n]{1,200}\"|“[^”\n]{1,200}”"
)
_LINK_REF = r"\[[^\]\n]{1,200}\]\([^)\s]{1,300}\)|(?:adr|rfc|dr)[\s_#-]*\d{1,8}\b"
_LIST = rf"(?P<refs>(?:{_REF})(?:\s*(?:,|;|and|&|、|和|及)\s*(?:{_REF}))*)"
_EN: list[tuple[Kind, re.Pattern[str]]] = [
    (
        "superseded-by",
        re.compile(
            r"\b(?:superseded|superceded|replaced|obsoleted|deprecated|rejected)\s+"
            rf"(?:by|in\s+favou?r\s+of){_SEP}{_LIST}",
            re.IGNORECASE,
        ),
    ),
    # "⌛️ Superseded [0019](0019-use-bash-go.md)": the status word, then the record.
    ("superseded-by", re.compile(rf"\bsuperseded(?!\s+by\b){_SEP}{_LIST}", re.IGNORECASE)),
    ("amended-by", re.compile(rf"\bamended\s+by{_SEP}{_LIST}", re.IGNORECASE)),
    (
        # "We decided to use AWS SSO in favour of [IAM Federated Access](0002-….md)": the
        # record that says it chose in favour of another record replaces it.
        "supersedes",
        re.compile(
            r"(?<!deprecated )(?<!rejected )(?<!replaced )(?<!superseded )"
            rf"\bin\s+favou?r\s+of{_SEP}(?P<refs>{_LINK_REF}(?:\s*(?:,|and|&)\s*{_LINK_REF})*)",
            re.IGNORECASE,
        ),
    ),
    (
        # A status that sends the reader on: "❌ Rejected (see [019](019-shared.md))".
        "superseded-by",
        re.compile(
            r"\b(?:rejected|deprecated|superseded|obsolete|retired)\W{0,4}\(?\s*"
            rf"(?:see|in\s+favou?r\s+of){_SEP}{_LIST}",
            re.IGNORECASE,
        ),
    ),
    (
        "supersedes",
        re.compile(rf"\b(?:supersedes|supercedes|replaces|obsoletes){_SEP}{_LIST}", re.IGNORECASE),
    ),
    ("amends", re.compile(rf"\bamends{_SEP}{_LIST}", re.IGNORECASE)),
]
_ZH_REF = rf"(?P<refs>(?:{_REF})(?:\s*(?:,|，|、|和|及)\s*(?:{_REF}))*)"
_ZH: list[tuple[Kind, re.Pattern[str]]] = [
    (
        "superseded-by",
        re.compile(rf"(?:已经|已)?(?:被|由)\s*{_ZH_REF}\s*(?:所)?(?:取代|替代|替换|代替)", re.I),
    ),
    ("amended-by", re.compile(rf"(?:已经|已)?(?:被|由)\s*{_ZH_REF}\s*(?:所)?修订", re.I)),
    (
        "superseded-by",
        re.compile(rf"废弃[^\n。]{{0,6}}?(?:见|参见|改用|请用|使用){_SEP}{_ZH_REF}", re.I),
    ),
    (
        "supersedes",
        re.compile(rf"(?<![被由])(?:取代|替代|替换|代替)(?:了)?{_SEP}{_ZH_REF}", re.I),
    ),
    ("amends", re.compile(rf"(?<![被由])修订(?:了)?{_SEP}{_ZH_REF}", re.I)),
]
_PROSE: list[tuple[Kind, re.Pattern[str]]] = [
    # "Until now we have been recommending `node-fetch` through [ADR013](./adr013-….md)":
    # what the linked record decided held until this one.
    (
        "supersedes",
        re.compile(
            r"\b(?:until now|up to now|until recently)\b(?:[^.\n]|\.(?=\w)){0,200}?"
            rf"(?P<refs>{_LINK_REF})",
            re.IGNORECASE,
        ),
    ),
]
_PLANNED = re.compile(
    r"\b(?:move|moving)\s+on\s+from\s+this\b(?:[^.\n]|\.(?=\w)){0,160}?\bsee"
    rf"{_SEP}(?P<refs>{_LINK_REF})",
    re.IGNORECASE,
)
_ONE_REF = re.compile(_REF, re.IGNORECASE)
_BARE = re.compile(r"#?\d{1,8}")
_STRONG = re.compile(r"(?i)supersed|supercedes|amend|取代|替代|修订")
_SENDS_ON = re.compile(
    r"(?i)\b(?:rejected|deprecated|superseded|obsolete|retired)\W{0,4}\(?\s*see\b"
)


def _status_line(line: str) -> bool:
    """A line that states a record's status: short, or saying "status"."""
    return len(line.strip()) <= 100 or "status" in line.casefold() or "状态" in line


def _plain_status(m: re.Match[str], line: str) -> bool:
    """A bare number ("Superseded by 7", "Replaced by: 0012") is a reference only after a
    word that always means a record, or on a short status line: in prose "replaced by 2
    services" counts things."""
    return bool(_STRONG.search(m.group(0))) or len(line.strip()) <= 60


_LINK = re.compile(r"\[(?P<text>[^\]\n]{1,200})\]\((?P<target>[^)\s]{1,300})\)")


def _ref(text: str) -> Ref | None:
    link = _LINK.fullmatch(text)
    if link is not None:
        target = link.group("target").split("#")[0].rstrip("/")
        stem = re.split(r"[/\\]", target)[-1]
        if re.match(r"(?i)^https?:", target) and not re.search(r"(?i)\d", stem):
            return None  # a page elsewhere, not a record of this scope
        number = _number(stem) if stem else None
        if number is None:
            number = _number(link.group("text"))
        key = title_key(stem) or title_key(link.group("text"))
        text_key = title_key(link.group("text"))
        if not key or key.isdigit():
            key = text_key
        return Ref(number, key or None, text)
    inner = text.strip('`"“”').strip()
    number = _number(inner.lstrip("#"))
    key = title_key(inner)
    if number is None and (not key or len(key) < 6):
        return None
    return Ref(number, key if key and not key.isdigit() else None, text)


def status_lines(text: str) -> list[StatusLine]:
    """The status lines of a record that name other records, in order."""
    out: list[StatusLine] = []
    seen: set[tuple[str, str]] = set()
    for line in text.splitlines():
        if not re.search(STATUS_KEYWORDS, line):
            continue
        for kind, rx in (*_EN, *_ZH):
            for m in rx.finditer(line):
                refs = tuple(
                    r
                    for r in (_ref(x.group(0)) for x in _ONE_REF.finditer(m.group("refs")))
                    if r is not None and (not _BARE.fullmatch(r.text) or _plain_status(m, line))
                )
                if _SENDS_ON.search(m.group(0)) and not _status_line(line):
                    continue  # "deprecated (see the docs)" in prose
                if refs and (kind, m.group(0)) not in seen:
                    seen.add((kind, m.group(0)))
                    out.append(StatusLine(kind, refs, line.strip()[:300]))
    # Prose that runs over wrapped lines is read a paragraph at a time.
    for paragraph in re.split(r"\n\s*\n", text):
        joined = " ".join(paragraph.split())
        if not re.search(STATUS_KEYWORDS, joined):
            continue
        found = [(kind, rx, False) for kind, rx in _PROSE] + [("superseded-by", _PLANNED, True)]
        for kind, rx, planned in found:
            for m in rx.finditer(joined):
                refs = tuple(
                    r
                    for r in (_ref(x.group(0)) for x in _ONE_REF.finditer(m.group("refs")))
                    if r is not None
                )
                if refs and (kind, m.group(0)) not in seen:
                    seen.add((kind, m.group(0)))
                    out.append(StatusLine(kind, refs, m.group(0).strip()[:300], planned))
    return out


# --------------------------------------------------------------------------- resolving


@dataclass
class Names:
    """The scope's records by number and by title key, for resolving references."""

    by_number: dict[int, list[str]]
    by_key: dict[str, list[str]]

    @classmethod
    def of(cls, records: Sequence[Record]) -> Names:
        by_number: dict[int, list[str]] = {}
        by_key: dict[str, list[str]] = {}
        for record in records:
            numbers, keys = record_names(record)
            for number in numbers:
                by_number.setdefault(number, []).append(record.slug)
            for key in keys:
                by_key.setdefault(key, []).append(record.slug)
        return cls(by_number, by_key)


def resolve(ref: Ref, names: Names) -> str | None:
    """The one record of the scope a reference names, or None when none or several fit: a
    title key that matches picks among records of the same number."""
    by_key = list(dict.fromkeys(names.by_key.get(ref.key, []))) if ref.key else []
    by_number = names.by_number.get(ref.number, []) if ref.number is not None else []
    by_number = list(dict.fromkeys(by_number))
    if by_number and by_key:
        both = [s for s in by_number if s in by_key]
        if len(both) == 1:
            return both[0]
    if not by_key and ref.key and ref.key.count("-") >= 2:
        # A file name is often the title cut short ("switch-back-to-github-flow" for "Switch
        # back to GitHub Flow, but keeping the automated beta releases").
        prefix = ref.key + "-"
        by_key = list(
            dict.fromkeys(
                s for k, slugs in names.by_key.items() if k.startswith(prefix) for s in slugs
            )
        )
    if len(by_key) == 1:
        return by_key[0]
    if len(by_number) == 1 and not by_key:
        return by_number[0]
    return None


def links(records: Sequence[Record], speakers: Iterable[Record] | None = None) -> list[Link]:
    """Every link the status lines of `speakers` (default: all records) state among
    `records`, each once: "A supersedes B" said by A and "B superseded by A" said by B are
    one link, kept with the first line that said it."""
    names = Names.of(records)
    out: dict[tuple[str, str], Link] = {}
    for record in records if speakers is None else speakers:
        for status in status_lines(record.body):
            for ref in status.refs:
                other = resolve(ref, names)
                if other is None or other == record.slug:
                    continue
                if status.kind == "supersedes":
                    link = Link(record.slug, other, "supersedes", record.slug, status.line)
                elif status.kind == "superseded-by":
                    link = Link(
                        other, record.slug, "supersedes", record.slug, status.line, status.planned
                    )
                elif status.kind == "amends":
                    link = Link(record.slug, other, "amends", record.slug, status.line)
                else:
                    link = Link(other, record.slug, "amends", record.slug, status.line)
                out.setdefault((link.newer, link.older), link)
    return _carry_out(out)


def _carry_out(found: dict[tuple[str, str], Link]) -> list[Link]:
    """Links with each planned replacement resolved: a plan ("move on from this decision,
    see [021]") is a replacement only when the record it names was itself replaced (021
    "Superseded by 036"): its successor carried the plan out, and replaces the planning
    record, quoting both lines. A plan whose record still holds is a plan, and no link."""
    plain = {key: link for key, link in found.items() if not link.planned}
    successor: dict[str, Link] = {}
    for link in plain.values():
        if link.kind == "supersedes":
            successor.setdefault(link.older, link)
    for link in found.values():
        if not link.planned:
            continue
        head, seen, lines = link.newer, {link.older}, [link.line]
        while head in successor and head not in seen:
            seen.add(head)
            lines.append(successor[head].line)
            head = successor[head].newer
        if head != link.newer and head != link.older:
            plain.setdefault(
                (head, link.older),
                Link(head, link.older, "supersedes", link.said_by, " … ".join(lines)[:300]),
            )
    return list(plain.values())
