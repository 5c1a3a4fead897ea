"""A granted sensitive scope, in memory only: its search index and its entity view.

On disk a sensitive scope's memories are encrypted files and skeleton graph nodes (slug,
scope, type, times, decay state); the search index holds nothing of them. While a grant is
active the service decrypts the scope into a `ScopeView`: an in-memory tantivy index
(`SearchIndex.in_memory`) and `MemoryGraph`, the entity reads recall makes, answered from the
memories' own observations and relations exactly as the graph store derives them. Recall in
the scope runs the same `RecallPipeline` over these; the view is dropped when the grant ends.

Each memory of a view is `Held`: what its index document and entity view need, and its file's
plaintext, parsed into a `Memory` only when one is read (`get`, `list`). The held memories,
with the tokens the statistics counted, are what the scope's snapshot keeps
(`encode_snapshot`; sealed by `sensitive.snapshot`), so the next grant decrypts one file
instead of every memory file, and parses no YAML.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from memoryd import __version__
from memoryd.errors import StorageError
from memoryd.graph.store import CypherResult, EntityRow, SupersedeRow
from memoryd.models import DecayState, Memory, MemorySummary, MemoryType, Predicate
from memoryd.recall import conversation
from memoryd.recall.entities import EntityMatcher, build_matcher
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex, analysis_version
from memoryd.search.stats import Tokens
from memoryd.vault import parse

FileStamp = tuple[int, int, int, int]
"""What a memory file's inode said when it was read (`sensitive.snapshot.Fingerprint`)."""

logger = logging.getLogger(__name__)

_REFRESH_AT_MOST = 256
"""A held view takes up to this many changed memories (or a quarter of it) in place."""
MAX_FANOUT = 64
"""As the graph store's default: neighbours followed per node in a traversal."""


def _entity_parts(eid: str) -> tuple[str, str]:
    """`entity:library:React` → ("library", "React"), as the graph store splits ids."""
    _, _, rest = eid.partition(":")
    etype, _, name = rest.partition(":")
    return etype or "concept", name or eid


class Facts(NamedTuple):
    """What the entity view needs of one memory (`facts_of`)."""

    slug: str
    scope_hash: str
    created_at: datetime
    forgotten: bool
    supersedes: tuple[str, ...]
    observations: tuple[str, ...]
    relations: tuple[tuple[str | None, str, str, float, bool], ...]
    """(subject or None for the memory itself, object, predicate, confidence, closed)."""


def facts_of(memory: Memory) -> Facts:
    meta = memory.meta
    return Facts(
        meta.slug,
        meta.scope_hash,
        meta.created_at,
        meta.decay_state is DecayState.FORGOTTEN,
        tuple(meta.supersedes),
        tuple(meta.observations),
        tuple(
            (r.subject, r.object, r.predicate.value, r.confidence, r.superseded_at is not None)
            for r in meta.relations
        ),
    )


class Held:
    """One memory of a view: its index document and entity facts, and its file's plaintext,
    parsed into a `Memory` the first time one is read."""

    __slots__ = ("_memory", "cut", "doc", "facts", "file", "folder", "head", "stamp", "tokens")

    def __init__(
        self,
        *,
        file: str,
        folder: Path,
        stamp: FileStamp,
        head: str,
        cut: bool,
        doc: SearchDoc,
        facts: Facts,
        tokens: tuple[Tokens, Tokens] | None = None,
        memory: Memory | None = None,
    ) -> None:
        self.file = file
        """`<type dir>/<name>` in the scope's folder (`folder`)."""
        self.folder = folder
        self.stamp = stamp
        self.head = head
        self.cut = cut
        """`head` is the file's plaintext up to its body (the document's) and a newline;
        else the whole of it (`text`)."""
        self.doc = doc
        self.facts = facts
        self.tokens = tokens
        """The title's and body's tokens as the statistics count them, when known."""
        self._memory = memory

    @classmethod
    def of(cls, memory: Memory, *, file: str, folder: Path, stamp: FileStamp, text: str) -> Held:
        """A memory just decrypted from `text`, the plaintext of its file."""
        memory.sensitive = True
        # `parse` takes the body from the end of the file, less one newline on each side.
        cut = text.endswith(memory.body + "\n")
        return cls(
            file=file,
            folder=folder,
            stamp=stamp,
            head=text[: -len(memory.body) - 1] if cut else text,
            cut=cut,
            doc=plain_doc(memory),
            facts=facts_of(memory),
            memory=memory,
        )

    @property
    def path(self) -> Path:
        return self.folder / self.file

    @property
    def text(self) -> str:
        """The file's plaintext, as it was decrypted."""
        return f"{self.head}{self.doc.body}\n" if self.cut else self.head

    def memory(self) -> Memory:
        """The memory, parsed from its plaintext as the vault parses its file."""
        if self._memory is None:
            memory = parse(self.text, self.path)
            memory.sensitive = True
            self._memory = memory
        return self._memory


class HeldMemories(Mapping[str, Memory]):
    """A view's memories by slug, each parsed when it is first read."""

    def __init__(self, held: dict[str, Held]) -> None:
        self._held = held

    def __getitem__(self, slug: str) -> Memory:
        return self._held[slug].memory()

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)


@dataclass
class MemoryGraph:
    """The entity reads of `RecallPipeline` over one scope's memories, held in memory."""

    max_fanout: int = MAX_FANOUT
    generation: int = 0
    _mentions: dict[str, list[tuple[Any, str, float]]] = field(default_factory=dict)
    """entity id → (created_at, slug, confidence) of the memories mentioning it."""
    _relations: list[tuple[str, str, str, float]] = field(default_factory=list)
    """Current entity→entity relations: (from, to, predicate, confidence)."""
    _supersedes: dict[str, str] = field(default_factory=dict)
    _entities: dict[str, EntityRow] = field(default_factory=dict)

    @classmethod
    def of(cls, held: Iterable[Facts], max_fanout: int = MAX_FANOUT) -> MemoryGraph:
        graph = cls(max_fanout=max_fanout)
        mentions: dict[tuple[str, str], tuple[Any, float]] = {}
        relations: dict[tuple[str, str, str], float] = {}
        counts: Counter[str] = Counter()
        for facts in held:
            if facts.forgotten:
                continue
            slug = facts.slug
            for older in facts.supersedes:
                graph._supersedes.setdefault(older, slug)
            for eid in facts.observations:
                graph._entity(eid, facts.scope_hash)
                mentions[(eid, slug)] = (facts.created_at, 1.0)
            for subject_or_none, obj, predicate, confidence, closed in facts.relations:
                subject = subject_or_none or slug
                for end in (subject, obj):
                    if end.startswith("entity:"):
                        graph._entity(end, facts.scope_hash)
                if closed:
                    continue
                if predicate == Predicate.MENTIONS and subject == slug:
                    if obj.startswith("entity:"):
                        prior = mentions.get((obj, slug), (None, 0.0))[1]
                        mentions[(obj, slug)] = (facts.created_at, max(prior, confidence))
                    continue
                if subject.startswith("entity:") and obj.startswith("entity:"):
                    key = (subject, obj, predicate)
                    relations[key] = max(relations.get(key, 0.0), confidence)
        for (eid, slug), (created_at, conf) in mentions.items():
            graph._mentions.setdefault(eid, []).append((created_at, slug, conf))
            counts[eid] += 1
        for eid, row in graph._entities.items():
            row.mention_count = counts[eid]
        graph._relations = [(s, o, p, c) for (s, o, p), c in sorted(relations.items())]
        return graph

    def _entity(self, eid: str, scope_hash: str) -> None:
        if eid not in self._entities:
            etype, name = _entity_parts(eid)
            self._entities[eid] = EntityRow(id=eid, name=name, type=etype, scope_hash=scope_hash)

    def entity_catalogue(self) -> list[EntityRow]:
        return [row.model_copy() for row in self._entities.values()]

    def mentioning(
        self, entity_ids: Sequence[str], *, scope_hashes: Sequence[str] | None = None
    ) -> list[tuple[str, str, float]]:
        """As `GraphStore.mentioning`: newest first, at most `max_fanout` per entity (the
        view holds one scope, so `scope_hashes` can only narrow it to itself)."""
        out: list[tuple[str, str, float]] = []
        for eid in dict.fromkeys(entity_ids):
            found = sorted(self._mentions.get(eid, ()), key=lambda row: row[1])
            found.sort(key=lambda row: row[0], reverse=True)
            out.extend((eid, slug, conf) for _, slug, conf in found[: self.max_fanout])
        return out

    def related_entities(self, entity_ids: Sequence[str]) -> list[tuple[str, str, str, float]]:
        """As `GraphStore.related_entities`: both directions, capped per entity."""
        out: list[tuple[str, str, str, float]] = []
        for eid in dict.fromkeys(entity_ids):
            best: dict[tuple[str, str], float] = {}
            for src, dst, pred, conf in self._relations:
                if eid in (src, dst):
                    other = dst if src == eid else src
                    best[(other, pred)] = max(best.get((other, pred), 0.0), conf)
            found = sorted(best.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
            out.extend((eid, o, p, c) for (o, p), c in found[: self.max_fanout])
        return out

    def superseded_by(self, slugs: Sequence[str]) -> dict[str, str]:
        return {slug: self._supersedes[slug] for slug in slugs if slug in self._supersedes}

    def supersede_edges(self, slugs: Sequence[str] | None = None) -> dict[str, SupersedeRow]:
        """The edges as the memories' frontmatter lists them (no rule or evidence kept here)."""
        wanted = self._supersedes if slugs is None else slugs
        return {
            slug: SupersedeRow(newer=self._supersedes[slug], older=slug)
            for slug in wanted
            if slug in self._supersedes
        }

    def neighbourhood(self, entity_id: str, *, depth: int = 1) -> CypherResult:
        """The stored relations one hop around `entity_id` (recall asks for one hop)."""
        frontier, seen = [entity_id], {entity_id}
        rows: list[list[Any]] = []
        for _ in range(max(1, min(depth, 3))):
            nxt: list[str] = []
            for src, dst, pred, conf in self._relations:
                if src in frontier or dst in frontier:
                    rows.append([src, pred, dst, conf])
                    for end in (src, dst):
                        if end not in seen:
                            seen.add(end)
                            nxt.append(end)
            frontier = nxt
            if not frontier:
                break
        unique = list({(r[0], r[1], r[2]): r for r in rows}.values())
        return CypherResult(columns=["from", "predicate", "to", "confidence"], rows=unique)


class ScopeView:
    """One granted scope's decrypted memories, searchable and linked, in memory only."""

    def __init__(
        self,
        scope_hash: str,
        held: Iterable[Held],
        *,
        stamp: object,
        max_fanout: int = MAX_FANOUT,
        saved: bool = False,
    ) -> None:
        self.scope_hash = scope_hash
        self.stamp = stamp
        """What the scope's folders looked like when the view was built (`ScopeViews`)."""
        self.saved = saved
        """The scope's snapshot holds exactly this view (nothing to write when it goes)."""
        self.held = {h.file: h for h in held}
        """Type dir/file name → the memory read from that file."""
        self._by_slug = {
            h.doc.slug: h for h in self.held.values() if h.doc.scope_hash == scope_hash
        }
        self.memories: Mapping[str, Memory] = HeldMemories(self._by_slug)
        self.graph = MemoryGraph.of((h.facts for h in self._by_slug.values()), max_fanout)
        self.index = SearchIndex.in_memory(scope_hash)
        docs = [
            h.doc for h in self._by_slug.values() if h.doc.decay_state is not DecayState.FORGOTTEN
        ]
        self.index.upsert(docs)
        # The statistics recall ranks with, counted from what was just indexed (with the
        # tokens the snapshot kept): the first recall under the grant reads nothing back.
        self.index.learn_tokens(
            (h.doc.title, h.doc.body, *h.tokens)
            for h in self._by_slug.values()
            if h.tokens is not None
        )
        self.index.tally(scope_hash, docs, conversation.is_turn)
        self._matcher: EntityMatcher | None = None

    def matcher(self) -> EntityMatcher:
        if self._matcher is None:
            self._matcher = build_matcher(self.graph.entity_catalogue())
        return self._matcher

    def summaries(self, slugs: Sequence[str] | None = None) -> dict[str, MemorySummary]:
        """The `list` rows of these memories (None: all), with their titles."""
        held = self._by_slug
        wanted = list(held) if slugs is None else [slug for slug in slugs if slug in held]
        rows: dict[str, MemorySummary] = {}
        for slug in wanted:
            meta = held[slug].memory().meta
            rows[slug] = MemorySummary(
                slug=slug,
                type=meta.type,
                title=meta.title,
                scope_hash=meta.scope_hash,
                source=meta.source,
                created_at=meta.created_at,
                updated_at=meta.updated_at,
                decay_state=meta.decay_state,
                tags=meta.tags,
                recall_count=meta.recall_count,
            )
        return rows

    def refresh(self, held: Iterable[Held], stamp: object) -> bool:
        """Bring the view to `held` in place, writing only the memories that changed to its
        index (the statistics follow each write, as on disk); False, changing nothing, when
        so many changed that building a new view costs less."""
        files = {h.file: h for h in held}
        by_slug = {h.doc.slug: h for h in files.values() if h.doc.scope_hash == self.scope_hash}
        old = self._by_slug
        changed = [h for slug, h in by_slug.items() if old.get(slug) is not h]
        removed = [slug for slug in old if slug not in by_slug]
        if len(changed) + len(removed) > max(_REFRESH_AT_MOST, len(by_slug) // 4):
            return False
        hidden = DecayState.FORGOTTEN
        gone = removed + [h.doc.slug for h in changed if h.doc.decay_state is hidden]
        try:
            self.index.delete(gone)
            self.index.upsert([h.doc for h in changed if h.doc.decay_state is not hidden])
        except StorageError as exc:
            logger.warning("rebuilding the view of scope %s: %s", self.scope_hash, exc.message)
            return False
        graph = MemoryGraph.of((h.facts for h in by_slug.values()), self.graph.max_fanout)
        if graph._entities.keys() != self.graph._entities.keys():
            self._matcher = None
        self.held, self._by_slug, self.graph = files, by_slug, graph
        self.memories = HeldMemories(by_slug)
        self.stamp, self.saved = stamp, False
        return True

    def snapshot(self) -> bytes:
        """This view as the scope's snapshot holds it (`encode_snapshot`)."""
        return encode_snapshot(self.scope_hash, self.held.values(), self.index)

    def close(self) -> None:
        self.index.close()
        self.held = {}
        self._by_slug.clear()


Load = Callable[[str, "ScopeView | None"], "tuple[list[Held], bool] | None"]
"""(scope, the view held now) → the scope's memories now, and whether they are what the
snapshot holds; None when they are exactly the held view's (nothing changed)."""


class ScopeViews:
    """The views of the granted scopes this process holds: built on first need (the daemon
    builds one as the grant starts), brought up to date when the scope's files changed (only
    the changed files are read again), dropped when the grant ends; a view the snapshot does
    not hold yet is saved as it goes."""

    def __init__(
        self,
        load: Load,
        stamp: Callable[[str], object],
        max_fanout: int = MAX_FANOUT,
        save: Callable[[ScopeView], None] | None = None,
    ) -> None:
        self._load = load
        self._stamp = stamp
        self._save = save
        self.max_fanout = max_fanout
        self._views: dict[str, ScopeView] = {}
        self._lock = threading.Lock()

    def get(self, scope_hash: str) -> ScopeView:
        """The scope's view as its files are now."""
        stamp = self._stamp(scope_hash)
        with self._lock:
            view = self._views.get(scope_hash)
            if view is not None and view.stamp == stamp:
                return view
            loaded = self._load(scope_hash, view)
            if loaded is None and view is not None:
                view.stamp = stamp  # a folder changed, no memory file did
                return view
            held, saved = loaded if loaded is not None else ([], False)
            if view is not None and view.refresh(held, stamp):
                return view
            fresh = ScopeView(
                scope_hash, held, stamp=stamp, max_fanout=self.max_fanout, saved=saved
            )
            self._views[scope_hash] = fresh
        if view is not None:
            view.close()
        return fresh

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._views)

    def drop(self, scope_hash: str, *, save: bool = True) -> bool:
        """Forget a scope's view (its grant ended), saving it first when the snapshot is
        behind it (not with `save=False`: the scope is being unmarked); whether one was held."""
        with self._lock:
            view = self._views.pop(scope_hash, None)
        if view is None:
            return False
        if save and not view.saved and self._save is not None:
            self._save(view)
        view.close()
        return True

    def drop_all(self) -> None:
        for scope_hash in self.held():
            self.drop(scope_hash)


def plain_doc(memory: Memory) -> SearchDoc:
    """The search document of a decrypted memory: its whole text (this index is in RAM)."""
    meta = memory.meta
    # Built from a validated memory: no second validation (a view indexes thousands at once).
    return SearchDoc.model_construct(
        slug=meta.slug,
        scope_hash=meta.scope_hash,
        type=meta.type,
        decay_state=meta.decay_state,
        title=meta.title,
        body=memory.body,
        tags=meta.tags,
        triggers=meta.triggers,
        created_at=meta.created_at,
    )


# -- the snapshot ---------------------------------------------------------------------------
SNAPSHOT_FORMAT = 1
"""Bump when what a `Held` derives from its memory (`plain_doc`, `facts_of`) changes: a
snapshot of another format (or written by another memoryd version) is not used."""


def encode_snapshot(scope_hash: str, held: Iterable[Held], index: SearchIndex) -> bytes:
    """The payload of a scope's snapshot: each held memory with its file's fingerprint, its
    plaintext, what its document and facts hold, and its tokens (from `index`)."""
    entries: list[list[Any]] = []
    vocabulary: dict[str, int] = {}
    number = vocabulary.setdefault
    for h in held:
        doc, facts = h.doc, h.facts
        title_tokens, body_tokens = h.tokens or index.tokens(doc.title, doc.body)
        entries.append(
            [
                h.file,
                list(h.stamp),
                h.head,
                h.cut,
                doc.slug,
                doc.scope_hash,
                doc.type.value,
                doc.decay_state.value,
                doc.title,
                doc.body,
                doc.tags,
                doc.triggers,
                doc.created_at.isoformat(),
                facts.forgotten,
                facts.supersedes,
                facts.observations,
                facts.relations,
                [number(t, len(vocabulary)) for t in title_tokens],
                [number(t, len(vocabulary)) for t in body_tokens],
            ]
        )
    return orjson.dumps(
        {
            "format": SNAPSHOT_FORMAT,
            "memoryd": __version__,
            "scope_hash": scope_hash,
            "analysis": analysis_version(),
            "vocabulary": list(vocabulary),
            "entries": entries,
        }
    )


_TYPES = {t.value: t for t in MemoryType}
_STATES = {s.value: s for s in DecayState}


class SnapshotUnusable(ValueError):
    """A snapshot that opened but cannot be used: another scope's, or malformed."""


class SnapshotOutdated(SnapshotUnusable):
    """A snapshot written by another format or memoryd version (an upgrade): rebuilt."""


def decode_snapshot(payload: bytes, scope_hash: str, folder: Path) -> dict[str, Held]:
    """The held memories of a snapshot payload, by file (`folder`: the scope's folder).
    Raises `SnapshotUnusable` for one that is not this format's or not this scope's."""
    try:
        data = orjson.loads(payload)
        if not isinstance(data, dict):
            raise SnapshotUnusable("the snapshot is not a mapping")
        if data.get("format") != SNAPSHOT_FORMAT or data.get("memoryd") != __version__:
            raise SnapshotOutdated(
                f"the snapshot has format {data.get('format')} of memoryd"
                f" {data.get('memoryd')}; this one reads {SNAPSHOT_FORMAT} of {__version__}"
            )
        if data.get("scope_hash") != scope_hash:
            raise SnapshotUnusable("the snapshot is another scope's")
        # Tokens are numbers in the vocabulary (each word stored and interned once).
        vocabulary = list(map(sys.intern, data["vocabulary"]))
        word = vocabulary.__getitem__
        with_tokens = data.get("analysis") == analysis_version()
        held: dict[str, Held] = {}
        for entry in data["entries"]:
            (file, stamp, head, cut, slug, scope, kind, state, title, body, tags, triggers,
             created, forgotten, supersedes, observations, relations, title_ids,
             body_ids) = entry  # fmt: skip
            created_at = datetime.fromisoformat(created)
            doc = SearchDoc.model_construct(
                slug=slug,
                scope_hash=scope,
                type=_TYPES[kind],
                decay_state=_STATES[state],
                title=title,
                body=body,
                tags=tags,
                triggers=triggers,
                created_at=created_at,
            )
            facts = Facts(
                slug,
                scope,
                created_at,
                bool(forgotten),
                tuple(supersedes),
                tuple(observations),
                tuple((s, o, p, float(c), bool(x)) for s, o, p, c, x in relations),
            )
            held[file] = Held(
                file=file,
                folder=folder,
                stamp=(stamp[0], stamp[1], stamp[2], stamp[3]),
                head=head,
                cut=bool(cut),
                doc=doc,
                facts=facts,
                tokens=(tuple(map(word, title_ids)), tuple(map(word, body_ids)))
                if with_tokens
                else None,
            )
        return held
    except SnapshotUnusable:
        raise
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise SnapshotUnusable(f"the snapshot's contents are malformed ({exc})") from exc
