"""The memories.json file format, and reading it with every problem named by its JSON path
and line (`load`); writing it is `sync.writing`.

Layout: top-level keys indented, one JSON object per line in each array, so the same state
gives the same bytes and a `diff` of two exports shows one line per changed memory. The file
stays readable by mcp-memory-service's importer (v5.0.1 … v10.x, FORMATS.md §1.10): every
memory has non-empty `content`, a bare-hex `content_hash` of `content.strip().lower()`,
numeric `created_at`/`updated_at`, a `metadata` object and a `tags` list, never null;
memoryd's own fields ride beside them (and, what must survive a trip through that tool, in
`metadata.memoryd`). A sensitive memory is never in `memories[]`: only sealed, in the
`encryption` block (`sync.cipher`), or not at all.

Over 600 lines: reading the whole file format (mcp-memory-service's versions and memoryd's),
with the error for every way a file can be wrong, in one place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from memoryd import jsondepth
from memoryd.audit import check_chain
from memoryd.errors import InvalidInput, describe_validation
from memoryd.models import (
    DecayState,
    Frontmatter,
    MemoryType,
    ScopeInfo,
)
from memoryd.redact import redact
from memoryd.redact.fields import clean_meta, clean_slug
from memoryd.sync.cipher import BadBlock, Encryption, read_block

FORMAT = 1
EXPORTER_VERSION = f"memoryd-{FORMAT}"
SCHEMA_COMPAT = ["mcp-memory-v5", EXPORTER_VERSION]
V5_SOURCE = "mcp-memory-service"
FOREIGN_SCOPE = "000000000000"
"""The scope of a memory mcp-memory-service wrote, until the import maps it (`--scope`)."""
_MEMORYD_VERSION = re.compile(r"memoryd-([0-9]+)")
_V5_VERSION = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)")
_V5_FIRST = (4, 5, 0)
"""The JSON sync exporter appeared in mcp-memory-service 4.5.0 (FORMATS.md §1.1)."""
_V5_OTHER = {"web-dashboard"}

TO_V5_TYPE = {
    MemoryType.DECISION: "decision",
    MemoryType.SESSION: "session",
    MemoryType.WARNING: "gotcha",
    MemoryType.FACT: "reference",
    MemoryType.PREFERENCE: "note",
    MemoryType.PLAYBOOK: "pattern",
}
"""memoryd's types in mcp-memory-service's ontology (≥ v9 coerces unknown ones to
`observation`); the original type travels in `metadata.memoryd.type`."""
FROM_V5_TYPE = {
    "decision": MemoryType.DECISION,
    "session": MemoryType.SESSION,
    "meeting": MemoryType.SESSION,
    "gotcha": MemoryType.WARNING,
    "error": MemoryType.WARNING,
    "bug": MemoryType.WARNING,
    "warning": MemoryType.WARNING,
    "pattern": MemoryType.PLAYBOOK,
    "workflow": MemoryType.PLAYBOOK,
    "playbook": MemoryType.PLAYBOOK,
    "preference": MemoryType.PREFERENCE,
}
"""A foreign memory's type here; anything else is a `fact`."""


def content_hash(content: str) -> str:
    """mcp-memory-service's hash (HEAD, = v5.0.1's with no metadata): bare hex."""
    return hashlib.sha256(content.strip().lower().encode("utf-8")).hexdigest()


def chunk_path(out: Path, sha: str) -> Path:
    return out.with_name(f"{out.name}.chunks") / f"{sha}.bin"


# -- reading --------------------------------------------------------------------------------
@dataclass(slots=True)
class RemoteMemory:
    """One memory of the file (scope not yet mapped). From a file laid out as memoryd writes
    it, only its line is kept and parsed again when the memory is needed (`open`), so an
    import of 100k memories does not hold 100k frontmatter objects."""

    index: int
    slug: str
    scope_hash: str
    foreign: bool
    """From mcp-memory-service (no memoryd frontmatter): slug and type were derived here."""
    hash: str
    """content_hash of the real body."""
    meta_: Frontmatter | None = None
    body_: str | None = None
    span: tuple[int, int] | None = None
    """(offset, length) of its JSON in the file."""
    chunk: str | None = None
    """The body from its chunk file, when it was too large for the file."""
    conflicts: tuple[str, ...] = ()
    """sha256 of each body the exporting side holds in `_conflicts/` against this one (a
    conflict open there): a side whose body is one of them keeps it and opens the conflict
    too, rather than taking this body as if it were newer."""
    embeddings_: dict[str, Any] | None = None
    """The carried vectors, when the file was parsed whole (else read again from `span`)."""

    def embeddings(self, doc: RemoteDocument) -> dict[str, Any] | None:
        """The memory's `embeddings` (model, fingerprint, float32 passage vectors)."""
        if self.span is None:
            return self.embeddings_
        found = json.loads(doc.read(*self.span)).get("embeddings")
        return found if isinstance(found, dict) else None

    def open(self, doc: RemoteDocument) -> tuple[Frontmatter, str]:
        """The memory's frontmatter (a fresh object each time it is parsed) and body."""
        if self.meta_ is not None and self.body_ is not None:
            return self.meta_, self.body_
        assert self.span is not None
        item = json.loads(doc.read(*self.span))
        meta = Frontmatter.model_validate(_front(item))
        return meta, self.chunk if self.chunk is not None else item["content"]


@dataclass
class RemoteDocument:
    path: Path
    exporter_version: str
    source_machine: str
    memoryd: bool
    """Written by memoryd (else by mcp-memory-service)."""
    chain_head: str | None
    memories: list[RemoteMemory]
    entities: list[dict[str, Any]] = field(default_factory=list)
    scopes: dict[str, ScopeInfo] = field(default_factory=dict)
    identity: str | None = None
    audit_chain: list[dict[str, Any]] = field(default_factory=list)
    referenced: set[str] = field(default_factory=set)
    """The entity ids the file's memories name."""
    handle: BinaryIO | None = None
    """The file, open while its memories are read again (`close`)."""
    encryption: Encryption | None = None
    """The sealed sensitive memories (`sync.cipher`), opened only with the passphrase."""
    include_embeddings: bool = False
    """The exporter carried each memory's vectors."""

    def read(self, offset: int, length: int) -> bytes:
        if self.handle is None:
            self.handle = self.path.open("rb")
        self.handle.seek(offset)
        return self.handle.read(length)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


Line = int | Callable[[], int | None] | None
"""A file line, or how to find it when an error needs it."""


def bad(
    doc: Path,
    where: str,
    problem: str,
    line: Line = None,
    hint: str | None = None,
) -> InvalidInput:
    """The error for a bad file: its JSON path, its line (found only now, when a callable),
    and that nothing was written."""
    if callable(line):
        line = line()
    at = f" (line {line})" if line is not None else ""
    return InvalidInput(
        f"{doc}: {where}{at}: {problem}; nothing was imported",
        hint=hint or "export the file again, or fix it at that position",
    )


class _Lines:
    """Finds the file line of `section[index]` only when an error needs it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def of(self, section: str, index: int) -> int | None:
        match = re.search(rf'^ {{0,4}}"{re.escape(section)}"\s*:\s*\[', self.text, re.MULTILINE)
        if match is None:
            return None
        decoder = json.JSONDecoder()
        pos = match.end()
        text = self.text
        for i in range(index + 1):
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if i == index:
                return text.count("\n", 0, pos) + 1
            try:
                _, pos = decoder.raw_decode(text, pos)
            except ValueError:
                return None
        return None


def _kind_of_version(doc: Path, version: Any) -> bool:
    """True for memoryd's own format, False for mcp-memory-service's; refuses the rest."""
    where = "export_metadata.exporter_version"
    if not isinstance(version, str):
        raise bad(doc, where, f"must be a string, got {json.dumps(version)}")
    mine = _MEMORYD_VERSION.fullmatch(version)
    if mine:
        if int(mine.group(1)) > FORMAT:
            raise bad(
                doc,
                where,
                f"{version!r} is from a newer memoryd (this one reads up to {EXPORTER_VERSION})",
                hint="upgrade memoryd on this machine, then import again",
            )
        return True
    theirs = _V5_VERSION.fullmatch(version)
    if (theirs and tuple(map(int, theirs.groups())) >= _V5_FIRST) or version in _V5_OTHER:
        return False
    raise bad(
        doc,
        where,
        f"unknown exporter_version {version!r}",
        hint=f"memoryd reads {EXPORTER_VERSION} and mcp-memory-service exports (4.5.0 and later)",
    )


def _timestamp(doc: Path, where: str, value: Any, line: Line) -> datetime:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(doc, where, f"must be epoch seconds (a number), got {json.dumps(value)}", line)
    try:
        return datetime.fromtimestamp(float(value), UTC).replace(microsecond=0)
    except (OverflowError, OSError, ValueError) as exc:
        raise bad(doc, where, f"{value} is not a time in epoch seconds ({exc})", line) from exc


def _stable_slug(title: str, created: datetime, digest: str) -> str:
    """A foreign memory's slug: readable, and the same on every import of it."""
    words = re.findall(r"[a-z0-9]+", title.lower())
    stem = "-".join(words)[:48].strip("-")
    return "-".join(p for p in (created.strftime("%Y-%m-%d"), stem, digest[:6]) if p)


_ARRAY_OPEN = re.compile(rb'^  "([a-z_]+)": \[(\],?)?\n$')
_VALUE_LINE = re.compile(rb'^  "([a-z_]+)": (.*?),?\n$')


def _read_layout(path: Path) -> tuple[dict[str, Any], dict[str, int]] | None:
    """The file as memoryd writes it, read line by line: the header and the small sections
    parsed, each `memories` item left as its (offset, length) in the file and each
    `audit_chain` item as its bytes (parsed one at a time later, so 100k memories never sit
    in memory as JSON trees), and the first line of each list. None when the file is laid
    out otherwise: then it is parsed whole."""
    data: dict[str, Any] = {}
    first: dict[str, int] = {}
    try:
        with path.open("rb") as fh:
            line = fh.readline()
            if line != b"{\n":
                return None
            header, number, pos = [line], 1, len(line)
            while line := fh.readline():
                number += 1
                pos += len(line)
                if line.startswith(b'  "memories": ['):
                    break
                header.append(line)
            if not line:
                return None
            data.update(jsondepth.loads(b"".join(header).rstrip().rstrip(b",") + b"\n}"))
            while True:
                opened = _ARRAY_OPEN.match(line)
                if opened:
                    name = opened.group(1).decode()
                    items: list[Any] = []
                    first[name] = number + 1
                    closed = opened.group(2) is not None
                    while not closed:
                        item = fh.readline()
                        number += 1
                        if item in (b"  ]\n", b"  ],\n"):
                            closed = True
                        elif not item.startswith(b"    {"):
                            return None
                        else:
                            body = item[4:].rstrip(b",\n")
                            items.append((pos + 4, len(body)) if name == "memories" else body)
                        pos += len(item)
                    if name not in ("memories", "audit_chain"):
                        items = [jsondepth.loads(i) for i in items]
                    data[name] = items
                else:
                    value = _VALUE_LINE.match(line)
                    if value is None:
                        return None
                    data[value.group(1).decode()] = jsondepth.loads(value.group(2))
                line = fh.readline()
                number += 1
                pos += len(line)
                if line == b"}\n":
                    return (data, first) if fh.read(1) == b"" else None
                if not line:
                    return None
    except (OSError, ValueError):
        return None


class _KnownLines:
    """Lines of list items in a file read by `_read_layout`: one item per line."""

    def __init__(self, first: dict[str, int]) -> None:
        self.first = first

    def of(self, section: str, index: int) -> int | None:
        start = self.first.get(section)
        return None if start is None else start + index


def sealed_count(path: Path) -> int:
    """How many sealed memories a memories.json says it holds (its header's
    `encrypted_memories`), read without loading the file: whether to ask for the passphrase.
    0 when the file cannot tell (the import then says what it needs)."""
    header: list[bytes] = []
    try:
        with path.open("rb") as fh:
            for line in fh:
                if line.startswith(b'  "memories": [') or len(header) > 64:
                    break
                header.append(line)
        data = jsondepth.loads(b"".join(header).rstrip().rstrip(b",") + b"\n}")
        count = data["export_metadata"].get("encrypted_memories", 0)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def load(path: Path) -> RemoteDocument:
    """Read and check the whole file (and its chunk files) before anything is written. The
    document keeps the file open to read its memories again: `close` it."""
    return _load(path)


def _load(path: Path) -> RemoteDocument:
    if not path.is_file():
        raise InvalidInput(f"cannot read {path}: no such file", hint="check the path")
    laid_out = _read_layout(path)
    lines: _Lines | _KnownLines
    if laid_out is not None:
        data, first = laid_out
        lines = _KnownLines(first)
    else:
        data, text = _parse_whole(path)
        lines = _Lines(text)
    if not isinstance(data, dict) or not isinstance(data.get("export_metadata"), dict):
        raise bad(path, "export_metadata", "missing: this is not a memories.json export")
    if not isinstance(data.get("memories"), list):
        raise bad(path, "memories", "missing or not a list")
    meta = data["export_metadata"]
    mine = _kind_of_version(path, meta.get("exporter_version"))
    _check_total(path, meta, len(data["memories"]))
    head = meta.get("audit_chain_head")
    doc = RemoteDocument(
        path=path,
        exporter_version=str(meta["exporter_version"]),
        source_machine=_source_name(meta.get("source_machine")),
        memoryd=mine,
        chain_head=head.get("hash") if isinstance(head, dict) else None,
        memories=[],
        include_embeddings=mine and meta.get("include_embeddings") is True,
    )
    try:
        _read_memories(doc, data, lines, mine)
    except BaseException:
        doc.close()
        raise
    return doc


def _check_total(path: Path, meta: dict[str, Any], held: int) -> None:
    """`total_memories` is the length of `memories` (mcp-memory-service writes
    `len(all_memories)`, memoryd the plain memories it wrote; sealed ones are counted in
    `encrypted_memories`). A file that disagrees was cut or edited: refused, since which of
    the two is right cannot be known. A file without the field (made by hand) is read."""
    if "total_memories" not in meta:
        return
    declared = meta["total_memories"]
    where = "export_metadata.total_memories"
    if not isinstance(declared, int) or isinstance(declared, bool):
        raise bad(path, where, f"must be a whole number, got {json.dumps(declared)}")
    if declared != held:
        raise bad(
            path,
            where,
            f"says {declared} memories but `memories` holds {held}",
            hint="the file was cut short or edited: export it again (or correct"
            " total_memories if you edited `memories` on purpose)",
        )


def _read_memories(
    doc: RemoteDocument, data: dict[str, Any], lines: _Lines | _KnownLines, mine: bool
) -> None:
    path = doc.path
    chunks = _chunks(path, data.get("large_file_manifest"), lines) if mine else {}
    seen: dict[str, int] = {}
    items: list[Any] = data["memories"]
    for i, item in enumerate(items):
        items[i] = None  # each raw memory is dropped once read
        where = f"memories[{i}]"
        span = item if isinstance(item, tuple) else None
        if span is not None:
            item = _item_json(path, where, doc.read(*span), lines.of("memories", i))
        if not isinstance(item, dict):
            raise bad(path, where, "not a JSON object", lines.of("memories", i))
        memory = _memory(path, where, i, item, mine, chunks, lines)
        if memory.meta_ is not None:
            doc.referenced.update(memory.meta_.observations)
            for rel in memory.meta_.relations:
                doc.referenced.update(
                    e for e in (rel.subject or "", rel.object) if e.startswith("entity:")
                )
            if span is not None and not memory.foreign:
                memory.span, memory.meta_, memory.body_ = span, None, None
            elif isinstance(item.get("embeddings"), dict):
                memory.embeddings_ = item["embeddings"]
        slug = memory.slug
        if slug in seen and not (memory.foreign and doc.memories[seen[slug]].hash == memory.hash):
            # Two mcp-memory-service memories of one day whose contents are the same as this
            # side keeps them (redacted): the plan skips the second as held twice.
            raise bad(
                path,
                f"{where}.id",
                f"slug {slug} repeats memories[{seen[slug]}]",
                lines.of("memories", i),
            )
        seen.setdefault(slug, len(doc.memories))
        doc.memories.append(memory)
    if mine:
        _memoryd_sections(doc, data, lines)
        if data.get("encryption") is not None:
            try:
                doc.encryption = read_block(data["encryption"])
            except BadBlock as exc:
                raise bad(path, exc.where, exc.problem, hint=exc.hint) from exc


def _item_json(path: Path, where: str, raw: bytes, line: int | None) -> Any:
    try:
        return jsondepth.loads(raw)
    except jsondepth.TooDeep as exc:
        raise _too_deep(path, where, exc, line) from None
    except UnicodeDecodeError as exc:
        raise bad(path, where, f"not UTF-8 text (byte {exc.start} of the line)", line) from exc
    except json.JSONDecodeError as exc:
        raise bad(path, where, f"not valid JSON ({exc.msg}, column {exc.colno + 4})", line) from exc


def _parse_whole(path: Path) -> tuple[Any, str]:
    """A file laid out otherwise (mcp-memory-service's, or edited by hand): parsed whole."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad(path, f"byte {exc.start}", "not UTF-8 text") from exc
    try:
        jsondepth.check_depth(raw)
    except jsondepth.TooDeep as exc:
        raise _too_deep(path, "$", exc) from None
    try:
        return json.loads(text), text
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON ({exc.msg}, column {exc.colno})"
        if not text.rstrip().endswith("}"):
            problem += ": the file ends early, truncated?"
        raise bad(path, "$", problem, exc.lineno) from exc


def _too_deep(
    path: Path, where: str, exc: jsondepth.TooDeep, line: int | None = None
) -> InvalidInput:
    return bad(
        path,
        where,
        f"JSON nested deeper than {exc.limit} levels (the limit for an imported file)",
        line,
        hint="this is not an export memoryd or mcp-memory-service writes; export it again",
    )


def _source_name(value: Any) -> str:
    name = re.sub(r"[^0-9A-Za-z._-]+", "-", str(value or "unknown")).strip(".-")
    return clean_slug(name[:64] or "unknown")  # it names conflict files and audit lines


def _memory(
    path: Path,
    where: str,
    index: int,
    item: dict[str, Any],
    mine: bool,
    chunks: dict[str, str],
    lines: _Lines | _KnownLines,
) -> RemoteMemory:
    def line() -> int | None:
        return lines.of("memories", index)

    content = item.get("content")
    if not isinstance(content, str) or not content.strip():
        problem = "missing" if content is None else "empty or not a string"
        raise bad(path, f"{where}.content", f"{problem}: a memory without content", line)
    for key in ("metadata", "tags"):
        if key in item and not isinstance(item[key], dict if key == "metadata" else list):
            raise bad(
                path,
                f"{where}.{key}",
                f"must be an {'object' if key == 'metadata' else 'list'}",
                line,
            )
    created = _timestamp(path, f"{where}.created_at", item.get("created_at"), line)
    if not mine or "frontmatter" not in item:
        return _foreign(path, where, index, item, content, created, line)
    front = item["frontmatter"]
    if not isinstance(front, dict):
        raise bad(path, f"{where}.frontmatter", "must be an object", line)
    try:
        fm = Frontmatter.model_validate(_front(item))
    except ValidationError as exc:
        raise bad(path, f"{where}.frontmatter", describe_validation(exc.errors()), line) from exc
    body = content
    pointer = item.get("large_file_pointer")
    if pointer is not None:
        sha = pointer.get("sha256") if isinstance(pointer, dict) else None
        if not isinstance(sha, str) or sha not in chunks:
            raise bad(
                path,
                f"{where}.large_file_pointer",
                "names no chunk of large_file_manifest",
                line,
            )
        body = chunks[sha]
    chunk = body if pointer is not None else None
    return RemoteMemory(
        index=index,
        slug=clean_slug(fm.slug),  # as this side will keep it (`redact.fields`)
        scope_hash=fm.scope_hash,
        foreign=False,
        hash=content_hash(body),
        meta_=fm,
        body_=body,
        chunk=chunk,
        conflicts=_open_conflicts(path, where, item.get("open_conflicts"), line),
    )


def _open_conflicts(path: Path, where: str, value: Any, line: Line) -> tuple[str, ...]:
    """The bodies (sha256) the exporting side holds open conflicts with for this memory."""
    if value is None:
        return ()
    found = []
    for i, entry in enumerate(value if isinstance(value, list) else [None]):
        sha = entry.get("body_sha256") if isinstance(entry, dict) else None
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise bad(
                path,
                f"{where}.open_conflicts[{i}]",
                "must be an object with body_sha256 (64 hex digits)",
                line,
            )
        found.append(sha)
    return tuple(found)


def _front(item: dict[str, Any]) -> dict[str, Any]:
    """The frontmatter, with memoryd's fields beside it filling what it leaves out."""
    front = dict(item["frontmatter"])
    for key in ("supersedes", "decay_state"):
        if key not in front and item.get(key) is not None:
            front[key] = item[key]
    return front


def _foreign(
    path: Path,
    where: str,
    index: int,
    item: dict[str, Any],
    content: str,
    created: datetime,
    line: Line,
) -> RemoteMemory:
    """A memory mcp-memory-service wrote: memoryd's fields derived from the v5 ones."""
    updated_raw = item.get("updated_at")
    updated = (
        _timestamp(path, f"{where}.updated_at", updated_raw, line)
        if updated_raw is not None
        else None
    )
    metadata = item.get("metadata") or {}
    found = metadata.get("memoryd")
    ours: dict[str, Any] = found if isinstance(found, dict) else {}
    kind = ours.get("type") or item.get("memory_type") or ""
    mtype = FROM_V5_TYPE.get(str(kind).lower(), MemoryType.FACT)
    with contextlib.suppress(ValueError):
        mtype = MemoryType(str(ours.get("type")))
    # Redacted before anything is derived from them: the slug (the file's name) is made
    # from the title, and the digest in it from the content, as this side keeps them.
    content = redact(content)
    if not content.strip():
        raise bad(path, f"{where}.content", "empty once its control characters are dropped", line)
    digest = content_hash(content)
    title = redact(str(ours.get("title") or content.strip().splitlines()[0])).strip()[:120]
    tags = [str(t) for t in item.get("tags") or [] if isinstance(t, str)]
    source = str(ours.get("source") or V5_SOURCE)
    slug = clean_slug(str(ours.get("id") or _stable_slug(title, created, digest)))
    try:
        fm = Frontmatter(
            title=title,
            slug=slug,
            type=mtype,
            scope_hash=str(ours.get("scope") or FOREIGN_SCOPE),
            source=source,
            created_at=created,
            updated_at=updated if updated and updated != created else None,
            tags=tags,
            supersedes=[s for s in ours.get("supersedes") or [] if isinstance(s, str)],
            decay_state=DecayState(str(ours.get("decay_state") or "alive")),
        )
        fm = clean_meta(fm)  # tags, source, supersedes
    except (ValidationError, ValueError) as exc:
        problem = (
            describe_validation(exc.errors()) if isinstance(exc, ValidationError) else str(exc)
        )
        raise bad(path, where, problem, line) from exc
    return RemoteMemory(
        index=index,
        slug=fm.slug,
        scope_hash=fm.scope_hash,
        foreign=True,
        hash=digest,
        meta_=fm,
        body_=content.strip(),
    )


def _chunks(path: Path, manifest: Any, lines: _Lines | _KnownLines) -> dict[str, str]:
    """sha256 → body of every chunk file, each checked against its name and size."""
    if manifest is None:
        return {}
    if not isinstance(manifest, list):
        raise bad(path, "large_file_manifest", "must be a list")
    found: dict[str, str] = {}
    for i, entry in enumerate(manifest):
        where = f"large_file_manifest[{i}]"

        def line(i: int = i) -> int | None:
            return lines.of("large_file_manifest", i)

        sha = entry.get("sha256") if isinstance(entry, dict) else None
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise bad(path, f"{where}.sha256", "must be 64 hex digits", line)
        chunk = chunk_path(path, sha)
        try:
            data = chunk.read_bytes()
        except OSError as exc:
            raise bad(
                path,
                where,
                f"chunk file {chunk} cannot be read ({exc.strerror or exc})",
                line,
                hint=f"copy the {chunk.parent.name}/ folder with the file",
            ) from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha:
            raise bad(
                path,
                where,
                f"chunk file {chunk} has sha256 {actual}, expected {sha} (damaged or replaced)",
                line,
                hint="copy the chunk files again from the exporting machine",
            )
        try:
            found[sha] = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise bad(path, where, f"chunk file {chunk} is not UTF-8 text", line) from exc
    return found


def _memoryd_sections(
    doc: RemoteDocument, data: dict[str, Any], lines: _Lines | _KnownLines
) -> None:
    path = doc.path
    for name in ("entities", "relations", "supersedes_chain", "scopes"):
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise bad(path, name, "must be a list of objects")
    doc.entities = list(data.get("entities", []))
    for i, item in enumerate(data.get("scopes", [])):
        try:
            info = ScopeInfo.model_validate(item)
        except ValidationError as exc:
            where = f"scopes[{i}]"
            raise bad(
                path, where, describe_validation(exc.errors()), lines.of("scopes", i)
            ) from exc
        doc.scopes[info.scope_hash] = info
    snapshot = data.get("identity_snapshot")
    if snapshot is not None:
        content = snapshot.get("content") if isinstance(snapshot, dict) else None
        if not isinstance(content, str):
            raise bad(path, "identity_snapshot.content", "must be a string")
        doc.identity = content
    chain = data.get("audit_chain")
    if chain is not None:
        if not isinstance(chain, list):
            raise bad(path, "audit_chain", "must be a list")
        keep = ("seq", "event_type", "actor", "ts", "this_hash", "scope_hash", "target_id")
        compact: list[dict[str, Any]] = []

        def records() -> Iterator[Any]:
            """Each line parsed once, checked, and kept only in the fields an import uses."""
            for i, raw in enumerate(chain):
                chain[i] = None
                rec = raw
                if isinstance(raw, bytes):
                    rec = _item_json(path, f"audit_chain[{i}]", raw, lines.of("audit_chain", i))
                if isinstance(rec, dict):
                    compact.append({k: rec.get(k) for k in keep})
                yield rec

        problem = check_chain(records())
        if problem is not None:
            index, message = problem
            raise bad(
                path,
                f"audit_chain[{index}]",
                f"the audit chain is broken at audit line {index + 1}: {message}",
                lines.of("audit_chain", index),
                hint="the file was changed after export; export it again on the other machine",
            )
        if compact and doc.chain_head is not None and compact[-1]["this_hash"] != doc.chain_head:
            raise bad(
                path,
                "export_metadata.audit_chain_head",
                "does not match the last line of audit_chain (lines removed from the end?)",
                hint="export it again on the other machine",
            )
        doc.audit_chain = compact
