"""Merge duplicate memories into one, and find the candidates (seeds/004 合并去重).

`merge(keep=A, drop=[B, C])` folds B and C into A: their tags, triggers, entity mentions
(`observations`), relations (re-sourced to A), supersedes edges (B's move to A, and memories
that superseded B now supersede A), recall counts (summed; the latest recall wins) and their
pending promotions (status `merged`). B and C are archived, not erased: their files move to
`forgotten/` with `merged_into: A`, they keep their text but no longer their links, so the
graph counts each mention once. One `merge` audit event on A names them all.

`duplicates` lists candidate pairs within a scope: equal fingerprints (sha1 of the first 500
characters of the body, as `record` refuses them), and near-duplicates whose shingle sets
overlap by at least `NEAR_DUPLICATE_JACCARD` (0.8). Shingles are three consecutive words, or
four consecutive characters of Chinese, Japanese or Korean text (which has no spaces), taken
from the title and the first `SHINGLE_CHARS` of the body. To avoid comparing every pair,
each memory keeps a bottom-k sketch (its `SKETCH` smallest shingle hashes); only memories
sharing a sketch hash are compared, and hashes shared by more than `BUCKET_CAP` memories
(boilerplate) are not used to pair them.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from memoryd.audit import AuditEvent
from memoryd.errors import Conflict, InvalidInput, MemorydError, NotFound
from memoryd.governance.stores import Stores
from memoryd.journal import IntentItem
from memoryd.models import CJK, DecayState, Frontmatter, Memory, RelationRef
from memoryd.redact.fields import clean_stored
from memoryd.vault import FORGOTTEN_DIR, render

logger = logging.getLogger(__name__)

NEAR_DUPLICATE_JACCARD = 0.8
SHINGLE_CHARS = 4000
SKETCH = 16
BUCKET_CAP = 200
_WORD = re.compile(rf"[{CJK}]|[^\W_]+", re.UNICODE)
_IS_CJK = re.compile(f"[{CJK}]")


class MergeResult(BaseModel):
    """What `memoryd merge` did."""

    keep: str
    dropped: list[str]
    tags: list[str]
    triggers: list[str]
    observations: int
    relations: int
    supersedes: list[str]
    repointed: list[str]
    """Other memories whose supersedes named a dropped one and now name `keep`."""
    recall_count: int
    promotions_merged: list[int]


class DuplicatePair(BaseModel):
    """Two memories that say (nearly) the same; `keep` is the older."""

    scope_hash: str
    keep: str
    drop: str
    keep_title: str
    drop_title: str
    kind: str
    """`fingerprint` (equal start of body) or `near` (shingle overlap)."""
    similarity: float


# -- merge --------------------------------------------------------------------------------------
def _locate(stores: Stores, slug: str) -> Memory:
    row = stores.graph.get_memory(slug)
    path = row.path if row is not None and row.path else stores.vault.find(slug)
    if not path:
        raise NotFound(f"no memory with slug {slug!r}", hint="`memoryd list` shows the slugs")
    memory = stores.vault.read(Path(path))
    if memory.meta.slug != slug:
        raise NotFound(f"{path} holds {memory.meta.slug!r}, not {slug!r}")
    return memory


def _edited(
    old: Memory, changes: dict[str, Any], now: datetime, path: Path | None = None
) -> Memory:
    meta = Frontmatter.model_validate({**old.meta.model_dump(), **changes, "updated_at": now})
    return Memory(meta=meta, body=old.body, path=path or old.path, sensitive=old.sensitive)


def merge(
    stores: Stores,
    keep: str,
    drop: Sequence[str],
    *,
    across_scopes: bool,
    now: datetime,
    merge_promotions: Callable[[Sequence[str], datetime], list[int]],
) -> MergeResult:
    """Fold `drop` into `keep` (see the module docstring). `merge_promotions(slugs, now)`
    marks the pending promotions of the dropped memories `merged` (governance.db)."""
    drops = list(dict.fromkeys(drop))
    if not drops:
        raise InvalidInput("nothing to merge", hint="name the memories to fold in with --drop")
    if keep in drops:
        raise InvalidInput(f"{keep} is both kept and dropped", hint="name it only in --keep")
    kept = _locate(stores, keep)
    gone = [_locate(stores, slug) for slug in drops]
    for memory in (kept, *gone):
        if memory.sensitive:
            raise InvalidInput(f"{memory.slug} is in a sensitive scope; it cannot be merged")
        if memory.meta.decay_state is DecayState.FORGOTTEN:
            raise Conflict(
                f"{memory.slug} is forgotten (archived)",
                hint=f"`memoryd restore {memory.slug}` first, if it should take part",
            )
    scopes = {m.meta.scope_hash for m in (kept, *gone)}
    if len(scopes) > 1 and not across_scopes:
        raise InvalidInput(
            f"these memories belong to {len(scopes)} scopes ({', '.join(sorted(scopes))});"
            " merging across scopes needs --across-scopes",
            hint="the kept memory's scope stays; check the slugs are the ones you meant",
        )
    names = set(drops)
    meta = kept.meta
    tags, triggers = list(meta.tags), list(meta.triggers)
    observations = list(meta.observations)
    relations = list(meta.relations)
    supersedes = list(meta.supersedes)
    count = meta.recall_count
    last = meta.last_recalled_at
    for other in gone:
        o = other.meta
        tags += o.tags
        triggers += o.triggers
        observations += o.observations
        relations += [_resourced(r, names, keep) for r in o.relations]
        supersedes += o.supersedes
        count += o.recall_count
        if o.last_recalled_at and (last is None or o.last_recalled_at > last):
            last = o.last_recalled_at
    relations = [_resourced(r, names, keep) for r in relations]
    new_keep = _edited(
        kept,
        {
            "tags": tags,
            "triggers": triggers,
            "observations": list(dict.fromkeys(observations)),
            "relations": list(dict.fromkeys(relations)),
            "supersedes": [s for s in dict.fromkeys(supersedes) if s != keep and s not in names],
            "recall_count": count,
            "last_recalled_at": last,
            "decay_state": DecayState.ALIVE,
        },
        now,
    )
    archived = [
        _edited(
            m,
            {
                "observations": [],
                "relations": [],
                "supersedes": [],
                "decay_state": DecayState.FORGOTTEN,
                "merged_into": keep,
            },
            now,
            stores.vault.scope_dir(m.meta.scope_hash) / FORGOTTEN_DIR / _file_name(m),
        )
        for m in gone
    ]
    rows = stores.graph.cypher(
        "UNWIND $drops AS d MATCH (n:Memory)-[:SUPERSEDES]->(:Memory {slug: d})"
        " RETURN DISTINCT n.slug",
        {"drops": drops},
        limit=100_000,
    ).rows
    others = [str(r[0]) for r in rows if r[0] != keep and r[0] not in names]
    repointed: list[tuple[Memory, Memory]] = []
    for slug in sorted(others):
        old = _locate(stores, slug)
        new = [keep if s in names else s for s in old.meta.supersedes]
        repointed.append((old, _edited(old, {"supersedes": list(dict.fromkeys(new))}, now)))
    changes: list[tuple[Memory, Memory, str, dict[str, Any]]] = [
        (kept, new_keep, "merge", {"dropped": drops, "recall_count": count}),
        *(
            (old, new, "merged_into", {"keep": keep})
            for old, new in zip(gone, archived, strict=True)
        ),
        *((old, new, "update", {"supersedes_repointed": keep}) for old, new in repointed),
    ]
    _write_all(stores, changes)
    merged = merge_promotions(drops, now)
    return MergeResult(
        keep=keep,
        dropped=drops,
        tags=new_keep.meta.tags,
        triggers=new_keep.meta.triggers,
        observations=len(new_keep.meta.observations),
        relations=len(new_keep.meta.relations),
        supersedes=new_keep.meta.supersedes,
        repointed=[new.slug for _, new in repointed],
        recall_count=count,
        promotions_merged=merged,
    )


def _file_name(memory: Memory) -> str:
    if memory.path is None:
        raise NotFound(f"memory {memory.slug} has no file")
    return memory.path.name


def _resourced(rel: RelationRef, names: set[str], keep: str) -> RelationRef:
    """A dropped memory's relation, as the kept one's: its subject (None = the memory
    itself) stays None, an endpoint naming a dropped memory names the kept one."""
    update: dict[str, Any] = {}
    if rel.subject in names:
        update["subject"] = None
    if rel.object in names:
        update["object"] = keep
    return rel.model_copy(update=update) if update else rel


def _write_all(stores: Stores, changes: list[tuple[Memory, Memory, str, dict[str, Any]]]) -> None:
    """Every file, then graph, index and audit log, under one write intent (a crash is
    settled by `MemoryService.recover`, which brings graph and index to the files)."""
    items = []
    payloads = []
    for old, new, event, details in changes:
        clean_stored(new)  # redacted like every write (`redact.fields`)
        data = render(new).encode("utf-8")
        payloads.append(data)
        items.append(
            IntentItem(
                slug=new.slug,
                path=str(new.path),
                event_type=event,
                scope_hash=new.meta.scope_hash,
                details=details,
                old_path=str(old.path) if old.path != new.path else None,
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
    intent = stores.journal.begin(
        op="replace", actor=stores.actor, audit_seq=stores.audit.last_seq(), items=items
    )
    written: list[tuple[Memory, Memory]] = []
    try:
        for old, new, _, _ in changes:
            with stores.lock(new.slug):
                stores.vault.write(new)
                written.append((old, new))
                if old.path is not None and old.path != new.path:
                    stores.vault.remove(old.path)
        news = [new for _, new, _, _ in changes]
        stores.graph.upsert_memories(news)
        stores.index.upsert([stores.search_doc(m) for m in news])
        stores.audit.append_many(
            [
                AuditEvent(
                    actor=stores.actor,
                    event_type=i.event_type,
                    scope_hash=i.scope_hash,
                    target_id=i.slug,
                    details=i.details,
                )
                for i in items
            ]
        )
    except MemorydError:
        logger.exception("merge stopped part-way; the next start settles it from the files")
        raise
    stores.journal.end(intent)


# -- duplicates ---------------------------------------------------------------------------------
def shingles(text: str) -> set[int]:
    """Hashed shingles: 3 words, or 4 characters of CJK text (see the module docstring)."""
    words = _WORD.findall(text.lower())
    if not words:
        return set()
    cjk = sum(1 for w in words if _IS_CJK.match(w))
    size = 4 if cjk * 2 > len(words) else 3
    if len(words) < size:
        return {_hash(" ".join(words))}
    return {_hash(" ".join(words[i : i + size])) for i in range(len(words) - size + 1)}


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def jaccard(a: set[int], b: set[int]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def near_pairs(sets: dict[str, set[int]]) -> list[tuple[str, str, float]]:
    """Pairs whose shingle sets overlap by `NEAR_DUPLICATE_JACCARD` or more, compared only
    when their bottom-k sketches share a hash (see the module docstring)."""
    buckets: dict[int, list[str]] = defaultdict(list)
    for slug, found in sets.items():
        for value in heapq.nsmallest(SKETCH, found):
            buckets[value].append(slug)
    candidates: set[tuple[str, str]] = set()
    for slugs in buckets.values():
        if 1 < len(slugs) <= BUCKET_CAP:
            candidates.update((a, b) for i, a in enumerate(slugs) for b in slugs[i + 1 :])
    found_pairs = []
    for a, b in sorted(candidates):
        similarity = jaccard(sets[a], sets[b])
        if similarity >= NEAR_DUPLICATE_JACCARD:
            found_pairs.append((a, b, similarity))
    return found_pairs


def duplicates(stores: Stores, *, scope_hash: str | None = None) -> list[DuplicatePair]:
    """Candidate pairs to merge, per scope: equal fingerprints first, then near-duplicates,
    most similar first. Forgotten and sensitive memories are left out."""
    where = "m.decay_state <> 'forgotten' AND m.sensitive = false"
    params: dict[str, Any] = {}
    if scope_hash is not None:
        where += " AND m.scope_hash = $scope"
        params["scope"] = scope_hash
    rows = stores.graph.cypher(
        f"MATCH (m:Memory) WHERE {where} RETURN m.slug, m.scope_hash, m.title, m.body,"
        " m.fingerprint, m.created_at ORDER BY m.created_at, m.slug",
        params,
        limit=100_000_000,
    ).rows
    pairs: dict[tuple[str, str], DuplicatePair] = {}
    order = {str(r[0]): i for i, r in enumerate(rows)}
    titles = {str(r[0]): str(r[2]) for r in rows}
    by_scope: dict[str, list[list[Any]]] = defaultdict(list)
    for row in rows:
        by_scope[str(row[1])].append(row)

    def add(scope: str, a: str, b: str, kind: str, similarity: float) -> None:
        first, second = sorted((a, b), key=order.__getitem__)
        if (first, second) not in pairs:
            pairs[(first, second)] = DuplicatePair(
                scope_hash=scope,
                keep=first,
                drop=second,
                keep_title=titles[first],
                drop_title=titles[second],
                kind=kind,
                similarity=round(similarity, 3),
            )

    for scope, members in by_scope.items():
        by_fp: dict[str, list[str]] = defaultdict(list)
        for slug, _, _, body, fp, _ in members:
            if body:
                by_fp[str(fp)].append(str(slug))
        for slugs in by_fp.values():
            for other in slugs[1:]:
                add(scope, slugs[0], other, "fingerprint", 1.0)
        sets = {str(r[0]): shingles(f"{r[2]}\n{str(r[3])[:SHINGLE_CHARS]}") for r in members}
        for a, b, similarity in near_pairs(sets):
            add(scope, a, b, "near", similarity)
    return sorted(
        pairs.values(), key=lambda p: (p.kind != "fingerprint", -p.similarity, p.keep, p.drop)
    )
