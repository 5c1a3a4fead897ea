"""The entity graph's edits and reads: resolve, context, neighbours, relations, aliases,
merges and deletions (each audited, so `reindex` replays them)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from memoryd.domain.core import (
    ServiceCore,
)
from memoryd.errors import (
    BrokenMemoryFile,
    InvalidInput,
    MemorydError,
    NotFound,
)
from memoryd.graph.store import (
    CypherResult,
    EntityContext,
    EntityRow,
    RelationRow,
    SupersedeRow,
)
from memoryd.journal import IntentItem
from memoryd.models import (
    DecayState,
    EntityDeletion,
    Memory,
    MemoryType,
    Predicate,
    RelationRef,
    utcnow,
)
from memoryd.redact import redact

logger = logging.getLogger(__name__)


class Entities(ServiceCore):
    """Entities and relations."""

    # -- entities -------------------------------------------------------------------------
    def resolve_entity(self, name_or_id: str) -> EntityRow:
        """An entity by id (`entity:library:React`), name or alias."""
        entity = self.graph.get_entity(name_or_id)
        if entity is not None:
            return entity
        matcher = self._entity_matcher()
        from memoryd.extraction.linking import normalise_name

        ids = sorted(matcher.by_key.get(normalise_name(name_or_id), ()))
        ids = [self._merged_into().get(i, i) for i in ids]
        if not ids:
            raise NotFound(
                f"no entity named {name_or_id!r}", hint="`memoryd entity list` shows the entities"
            )
        found = [e for e in (self.graph.get_entity(i) for i in dict.fromkeys(ids)) if e]
        if len(found) > 1:
            raise InvalidInput(
                f"{name_or_id!r} names several entities: {', '.join(e.id for e in found)}",
                hint="pass the full entity id",
            )
        if not found:
            raise NotFound(f"no entity named {name_or_id!r}")
        return found[0]

    def entity_context(self, name_or_id: str, *, limit: int = 20) -> EntityContext:
        """An entity with its relations, neighbours and the memories about it, current first
        (newest first, then by slug: memories written in the same instant keep one order)."""
        entity = self.resolve_entity(name_or_id)
        # the newest `max_fanout`, as `mentioning` caps them, sorted in the engine
        newest = self.graph.newest_mentioning(entity.id, self.graph.max_fanout)
        superseded = self.graph.superseded_by([m.slug for m in newest])
        # The graph holds no text of a sensitive memory; whatever it holds is not shown here.
        shown, _ = self.gate.partition(newest, keep_granted=False)
        memories = sorted(
            shown, key=lambda r: (r.slug in superseded, -r.created_at.timestamp(), r.slug)
        )[:limit]
        return EntityContext(
            entity=entity,
            relations=self.graph.neighbourhood(entity.id, depth=1).rows,
            memories=memories,
            superseded=sorted(superseded),
        )

    def neighbors(self, name_or_id: str, *, depth: int = 2) -> CypherResult:
        """Entities within `depth` hops of an entity (fan-out capped at hubs)."""
        if not 1 <= depth <= 3:
            raise InvalidInput(f"depth must be 1, 2 or 3 (got {depth})")
        return self.graph.neighbourhood(self.resolve_entity(name_or_id).id, depth=depth)

    def supersedes_chain(self, slug: str) -> list[SupersedeRow]:
        if self.graph.get_memory(slug) is None:
            raise NotFound(f"no memory with slug {slug!r}")
        return self.graph.supersedes_chain(slug)

    def entity_supersedes(self, name_or_id: str) -> list[SupersedeRow]:
        """The supersedes chain of an entity: SUPERSEDES edges decided about it, or between
        memories that mention it, oldest decision first."""
        eid = self.resolve_entity(name_or_id).id
        result = self.graph.cypher(
            "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory)"
            " OPTIONAL MATCH (n)-[:MENTIONS]->(en:Entity {id: $id})"
            " OPTIONAL MATCH (o)-[:MENTIONS]->(eo:Entity {id: $id})"
            " WITH n, r, o, en, eo WHERE r.entity_id = $id OR en IS NOT NULL OR eo IS NOT NULL"
            " RETURN DISTINCT n.slug, o.slug, r.entity_id, r.confidence, r.decided_at,"
            " r.decided_by, r.reason, r.status, r.judge, r.rules"
            " ORDER BY r.decided_at, n.slug, o.slug",
            {"id": eid},
            limit=10_000,
        )
        keys = list(SupersedeRow.model_fields)  # the RETURN order above
        return [SupersedeRow.model_validate(dict(zip(keys, r, strict=True))) for r in result.rows]

    def relations(
        self,
        *,
        entity: str | None = None,
        predicate: Predicate | None = None,
        include_closed: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RelationRow]:
        """RELATES edges, newest first: all, or those touching one entity (id, name or alias).

        Closed relations (`superseded_at` set) are history and only listed on request.
        """
        found = self.graph.relation_rows(
            entity_id=None if entity is None else self.resolve_entity(entity).id,
            predicate=predicate,
            include_closed=include_closed,
            limit=limit,
            offset=offset,
        )
        keys = list(RelationRow.model_fields)  # the RETURN order above
        rows = []
        for row in found:
            data = dict(zip(keys, row, strict=True))
            data["subject_kind"] = str(data["subject_kind"]).lower()
            data["object_kind"] = str(data["object_kind"]).lower()
            rows.append(RelationRow.model_validate(data))
        return rows

    def alias_entity(self, name_or_id: str, alias: str) -> EntityRow:
        """Teach the graph another name for an entity; audit-logged so reindex replays it."""
        self._require_writable("add an entity alias")
        alias = redact(alias).strip()  # a name an agent or a sync file gave: redacted
        if not alias:
            raise InvalidInput("alias is empty")
        entity = self.resolve_entity(name_or_id)
        self._entity_write("entity_alias", entity.id, {"alias": alias})
        self.forget_entities()
        return self.resolve_entity(entity.id)

    def merge_entities(self, keep: str, drop: str) -> EntityRow:
        """Merge `drop` into `keep`: edges move, the name becomes an alias; reindex replays it."""
        self._require_writable("merge entities")
        kept, dropped = self.resolve_entity(keep), self.resolve_entity(drop)
        if kept.id == dropped.id:
            raise InvalidInput(f"cannot merge {kept.id} into itself")
        self._entity_write("entity_merge", kept.id, {"drop": dropped.id})
        self.forget_entities()
        self._merges = None
        return self.resolve_entity(kept.id)

    def repair_stray_entities(self) -> int:
        """Merge into the alias lexicon's entity each entity an older extraction made of one
        of its aliases ("K8s" beside "Kubernetes"): one thing, one entity. On open; one query
        of primary keys when nothing is owed. Each merge is an audited `entity_merge` (by
        `alias-lexicon`), as `memoryd entity merge` writes it. Returns how many merged."""
        self._require_writable("repair stray entities")
        from memoryd.extraction.pipeline import load_alias_lexicon
        from memoryd.models import EntityType, entity_id

        canonical: dict[str, str] = {}
        for entry in load_alias_lexicon():  # not the whole lexicon: this runs on every open
            keep = entity_id(entry.type, entry.name)
            for alias in entry.aliases:
                for kind in dict.fromkeys((entry.type, EntityType.CONCEPT)):
                    stray = entity_id(kind, alias)
                    if stray != keep:
                        canonical.setdefault(stray, keep)
        rows = self.graph.cypher(
            "UNWIND $ids AS i MATCH (e:Entity {id: i}) RETURN e.id",
            {"ids": sorted(canonical)},
            limit=100_000,
        ).rows
        merged = 0
        for (stray,) in rows:
            keep = canonical[str(stray)]
            if self.graph.get_entity(keep) is None:
                continue  # the only entity of the thing: nothing to merge it with
            try:
                self._entity_write(
                    "entity_merge", keep, {"drop": str(stray), "by": "alias-lexicon"}
                )
            except MemorydError as exc:
                logger.warning("stray entity %s not merged into %s: %s", stray, keep, exc)
                continue
            merged += 1
        if merged:
            self.forget_entities()
            self._merges = None
            logger.info("merged %d stray entities into the alias lexicon's entities", merged)
        return merged

    def _entity_write(self, event_type: str, entity_id: str, details: dict[str, Any]) -> None:
        """A change to an entity (merge, alias, delete): the graph, then its audit line, which
        `reindex` replays. Under a write intent, so a crash between the two is rolled
        forward on the next start (`_apply_entity_event` is idempotent)."""
        item = IntentItem(slug=entity_id, path="", event_type=event_type, details=details)
        intent = self._begin_write("entity", [item])
        try:
            self._apply_entity_event(item)
        except MemorydError:
            self.journal.end(intent)  # one graph transaction: a failed one changed nothing
            raise
        self.audit.append_many([self._intended_event(intent, item)])
        self.journal.end(intent)

    def delete_entity(self, name_or_id: str) -> EntityDeletion:
        """Take an entity out of the graph; no memory is erased (memoryd keeps history).

        Every memory whose frontmatter names it (or an entity merged into it) is rewritten
        without it: the id leaves `observations`, the relations involving it leave
        `relations`. A `fact` that stated only things about it (its observations, or
        relations with it: what the MCP memory tools write) is archived as well. Then the node
        goes and an `entity_delete` audit line is written. The vault no longer names the
        entity, so `reindex` does not bring it back; a later memory naming it does.
        """
        entity = self.resolve_entity(name_or_id)
        ids = {entity.id} | {d for d, k in self._merged_into().items() if k == entity.id}
        rows = self.graph.cypher(
            "MATCH (m:Memory)-[:MENTIONS]->(:Entity {id: $id}) RETURN m.slug AS slug UNION"
            " MATCH (:Entity {id: $id})-[r:RELATES]-() RETURN r.source_memory AS slug",
            {"id": entity.id},
            limit=10_000_000,
        ).rows
        result = EntityDeletion(entity_id=entity.id, name=entity.name)
        for slug in sorted({r[0] for r in rows if r[0]}):
            with self._file_lock(slug):
                try:
                    old = self._load(slug)
                except (NotFound, BrokenMemoryFile) as exc:
                    logger.warning("%s keeps no link to %s in its file: %s", slug, entity.id, exc)
                    continue
                gone = [r for r in old.meta.relations if r.subject in ids or r.object in ids]
                observations = [o for o in old.meta.observations if o not in ids]
                if not gone and len(observations) == len(old.meta.observations):
                    continue
                relations = [r for r in old.meta.relations if r not in gone]
                ends = ids | {e for r in gone for e in (r.subject, r.object) if e}
                only_about = (
                    old.meta.type is MemoryType.FACT
                    and not relations
                    and set(old.meta.observations) <= ends
                )
                changes: dict[str, Any] = {"observations": observations, "relations": relations}
                path = old.path
                if only_about:
                    changes["decay_state"] = DecayState.FORGOTTEN
                    path = self._forgotten_path(old)
                    result.archived.append(slug)
                else:
                    result.unlinked.append(slug)
                self._replace_everywhere(
                    old,
                    self._edited(old, changes, path),
                    event_type="archive" if only_about else "update",
                    details={"entity_delete": entity.id},
                )
        self._entity_write(
            "entity_delete",
            entity.id,
            {
                "name": entity.name,
                "archived": len(result.archived),
                "unlinked": len(result.unlinked),
            },
        )
        self.forget_entities()
        return result

    def close_relations(self, slug: str, relations: Sequence[RelationRef]) -> Memory:
        """Close relations a memory asserts (memoryd closes relations, it never drops them):
        `superseded_at` is set in the frontmatter, so the graph keeps them as history and
        `reindex` rebuilds them closed. A relation matches on subject, predicate, object and
        label. A `fact` left with no open relation and naming only their endpoints existed to
        state them (the MCP `create_relations` writes such facts): it is archived as well.
        Closing relations that are closed already changes nothing.
        """
        if not relations:
            raise InvalidInput("no relation to close", hint="name at least one relation")
        with self._file_lock(slug):  # the capture hook rewrites session files too
            old = self._load(slug)
            merged = self._merged_into()

            def key(rel: RelationRef) -> tuple[str | None, str, str, str | None]:
                subject = merged.get(rel.subject, rel.subject) if rel.subject else None
                return subject, rel.predicate.value, merged.get(rel.object, rel.object), rel.label

            wanted = {key(r) for r in relations}
            if not any(key(r) in wanted for r in old.meta.relations):
                raise NotFound(
                    f"memory {slug} asserts none of these relations",
                    hint="GET /v1/relations?entity=NAME lists relations and their source memory",
                )
            now = utcnow()
            closed = [
                r.model_copy(update={"superseded_at": now})
                if key(r) in wanted and r.superseded_at is None
                else r
                for r in old.meta.relations
            ]
            count = sum(a is not b for a, b in zip(closed, old.meta.relations, strict=True))
            if not count:
                return old
            ends = {e for r in closed for e in (r.subject, r.object) if e}
            archive = (
                old.meta.type is MemoryType.FACT
                and all(r.superseded_at is not None for r in closed)
                and set(old.meta.observations) <= ends
            )
            changes: dict[str, Any] = {"relations": closed}
            path = old.path
            if archive:
                changes["decay_state"] = DecayState.FORGOTTEN
                path = self._forgotten_path(old)
            new = self._edited(old, changes, path)
            self._replace_everywhere(
                old,
                new,
                event_type="archive" if archive else "relation_close",
                details={"closed": count},
            )
            return new
