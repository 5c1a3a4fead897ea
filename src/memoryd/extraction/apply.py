"""Turning extraction proposals into frontmatter: what the service writes for a memory."""

from __future__ import annotations

from memoryd.models import EntityType, Extraction, Memory, Predicate, RelationRef

OBSERVATION_CONFIDENCE = 0.75
ENTITY_TYPES = {t.value for t in EntityType}


def merge_extractions(base: Extraction, extra: Extraction) -> Extraction:
    """Union of two stages' proposals; the higher confidence wins for the same entity."""
    entities = {e.id: e for e in base.entities}
    for entity in extra.entities:
        if entity.id not in entities or entities[entity.id].confidence < entity.confidence:
            entities[entity.id] = entity
    relations = {(r.subject, r.predicate, r.object): r for r in base.relations}
    for rel in extra.relations:
        key = (rel.subject, rel.predicate, rel.object)
        if key not in relations or relations[key].confidence < rel.confidence:
            relations[key] = rel
    return Extraction(
        entities=list(entities.values()),
        relations=list(relations.values()),
        stages=[*base.stages, *(s for s in extra.stages if s not in base.stages)],
        notes=[*base.notes, *extra.notes],
    )


def apply_extraction(
    memory: Memory, found: Extraction, merged_into: dict[str, str] | None = None
) -> None:
    """Write proposals into the frontmatter: confident entities as observations, the rest as
    `mentions` relations with their confidence, and every other relation as it came."""
    redirect = merged_into or {}
    if redirect and redirect.keys() & {*(e.id for e in found.entities), *_ends(found)}:
        found = _redirected(found, redirect)
    observations = dict.fromkeys(memory.meta.observations)
    relations = {(r.subject, r.predicate, r.object): r for r in memory.meta.relations}
    for entity_id, confidence in sorted(
        ((e.id, e.confidence) for e in found.entities), key=lambda pair: pair[0]
    ):
        if confidence >= OBSERVATION_CONFIDENCE:
            observations.setdefault(entity_id, None)
        else:
            relations.setdefault(
                (None, Predicate.MENTIONS, entity_id),
                RelationRef(
                    predicate=Predicate.MENTIONS,
                    object=entity_id,
                    confidence=round(confidence, 3),
                ),
            )
    for rel in found.relations:
        subject = None if rel.subject == "memory" else rel.subject
        if rel.object == "memory" or (subject is None and rel.predicate is Predicate.MENTIONS):
            continue
        key = (subject, rel.predicate, rel.object)
        relations.setdefault(
            key,
            RelationRef(
                predicate=rel.predicate,
                object=rel.object,
                subject=subject,
                confidence=round(rel.confidence, 3),
            ),
        )
    memory.meta.observations = list(observations)
    memory.meta.relations = list(relations.values())


def _ends(found: Extraction) -> set[str]:
    return {end for r in found.relations for end in (r.subject, r.object)}


def _redirected(found: Extraction, redirect: dict[str, str]) -> Extraction:
    """`found` with every entity id merged away replaced by the one it was merged into
    (built only when some id is: a copy of every proposal cost each memory of a batch)."""
    return Extraction(
        entities=[
            e.model_copy(
                update=dict(zip(("type", "name"), redirect[e.id].split(":", 2)[1:], strict=True))
            )
            if e.id in redirect
            else e
            for e in found.entities
        ],
        relations=[
            r.model_copy(
                update={
                    "subject": redirect.get(r.subject, r.subject),
                    "object": redirect.get(r.object, r.object),
                }
            )
            for r in found.relations
        ],
    )
