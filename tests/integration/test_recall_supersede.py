"""A supersede edge reorders only memories about the query's subject (DESIGN §7, turn 3):
a wrong edge cannot bury the answer, a right one still puts what is current first, and each
hit's explanation shows the edge, its rule and its evidence sentence. Real Kuzu and index."""

from __future__ import annotations

from pathlib import Path

from memoryd.models import MemoryDraft, SupersedeDecision
from memoryd.service import MemoryService


def rec(svc: MemoryService, project: Path, title: str, body: str, **kw: object) -> str:
    draft = MemoryDraft.model_validate(
        {"type": "decision", "title": title, "body": body, "scope_path": project, **kw}
    )
    return svc.record(draft).slug


def judged_edge(
    svc: MemoryService, newer: str, older: str, *, judge: str, reason: str, entity: str | None
) -> None:
    """An automatic SUPERSEDES edge as the rules write it (in the newer memory's file, then
    the stores rebuilt from the files), whatever the rules of the day would judge."""
    memory = svc.get(newer)
    decision = SupersedeDecision(
        older=older, confidence=0.9, judge=judge, reason=reason, entity_id=entity
    )
    memory.meta.supersedes = [*(s for s in memory.meta.supersedes if s != older), older]
    kept = [d for d in memory.meta.supersede_decisions if d.older != older]
    memory.meta.supersede_decisions = [*kept, decision]
    svc.vault.write(memory)
    svc.reindex()


OTHER_DECISIONS = [
    ("ADR-0001: Record decisions", "We record architecture decisions as short markdown files."),
    ("ADR-0002: Monorepo", "All services live in one repository with a shared CI pipeline."),
    ("ADR-0005: API style", "Public endpoints are REST with JSON bodies and OpenAPI specs."),
    ("ADR-0006: Feature flags", "Features ship behind flags that product can turn on per tenant."),
]
"""A project's other decisions: the words of a query weigh as they do in a real scope, not as
in a scope of two memories (where every word both share weighs next to nothing)."""


def others(svc: MemoryService, project: Path) -> None:
    for title, body in OTHER_DECISIONS:
        rec(svc, project, title, body)


def test_a_wrong_edge_between_unrelated_decisions_does_not_bury_the_answer(
    svc: MemoryService, project: Path
) -> None:
    others(svc, project)
    logging = rec(
        svc,
        project,
        "ADR-0003: Structured logging",
        "We emit structured JSON logs with structlog so the log pipeline can parse them.",
    )
    queue = rec(
        svc,
        project,
        "ADR-0007: Job queue",
        "Background jobs go through a Redis-backed queue; workers no longer need to poll.",
    )
    judged_edge(
        svc,
        queue,
        logging,
        judge="rule:no-longer",
        reason="Background jobs go through a Redis-backed queue; workers no longer need to poll.",
        entity=None,
    )
    hits = svc.recall("How do we emit structured logs?", scope=project).hits
    order = [h.slug for h in hits]
    assert order[0] == logging
    assert queue not in order[:1]
    first = hits[0]
    assert first.superseded_by == queue
    assert "superseded" not in first.factors  # no demotion: the edge is not about this query
    # the explanation names the edge, its rule and its evidence sentence
    shown = first.paths[0]
    assert shown.startswith(f"superseded by {queue}, rule:no-longer")
    assert "workers no longer need to poll" in shown
    assert "not about this query" in shown


def test_a_right_edge_still_puts_the_current_decision_first(
    svc: MemoryService, project: Path
) -> None:
    others(svc, project)
    old = rec(
        svc,
        project,
        "ADR-0004: Job store",
        "The job store keeps job metadata in MySQL, with one table per queue.",
    )
    new = rec(
        svc,
        project,
        "ADR-0012: Job store on PostgreSQL",
        "Superseding ADR-0004: the job store moves its metadata from MySQL to PostgreSQL.",
    )
    judged_edge(
        svc,
        new,
        old,
        judge="rule:status-line",
        reason="Superseding ADR-0004: the job store moves its metadata from MySQL to PostgreSQL.",
        entity="entity:database:MySQL",
    )
    hits = svc.recall("Where does the job store keep job metadata?", scope=project).hits
    order = [h.slug for h in hits]
    assert order[:2] == [new, old]
    stale = hits[1]
    assert stale.superseded_by == new
    # bounded: the stale memory keeps a share of its score, not a near-zero factor
    assert stale.factors["superseded"] == 0.6
    assert stale.score > 0.5 * hits[0].score
    assert "rule:status-line on MySQL" in stale.paths[0]
    assert '"Superseding ADR-0004' in stale.paths[0]
    assert any(p.startswith(f"supersedes {old}") for p in hits[0].paths)


def test_a_successor_without_the_query_words_is_not_placed_above_the_match(
    svc: MemoryService, project: Path
) -> None:
    """The shape of the issue's 81 lost questions: the successor was pulled in with no query
    word in it and ranked first."""
    others(svc, project)
    cache = rec(svc, project, "Cache eviction", "Cache entries are evicted by LRU after an hour.")
    later = rec(svc, project, "Release cadence", "We ship a release every second Tuesday.")
    judged_edge(
        svc,
        later,
        cache,
        judge="rule:instead-of",
        reason="We ship a release every second Tuesday.",
        entity=None,
    )
    hits = svc.recall("cache eviction", scope=project).hits
    assert [h.slug for h in hits] == [cache]
    assert hits[0].score > 0.3  # the answer keeps its relevance


def test_the_query_naming_the_edges_entity_by_another_name_puts_the_current_one_first(
    svc: MemoryService, project: Path
) -> None:
    """ "What is the current decision about X", X named as engineers type it: neither memory
    says "k8s", the entity stage links it to Kubernetes, and the edge about Kubernetes puts
    the newer decision first."""
    others(svc, project)
    old = rec(svc, project, "Hosting", "Services run on a self-managed Kubernetes cluster.")
    new = rec(svc, project, "Managed hosting", "Services move to EKS, managed Kubernetes.")
    [kubernetes] = [e for e in svc.get(old).meta.observations if e.endswith(":Kubernetes")]
    assert kubernetes in svc.get(new).meta.observations
    judged_edge(
        svc,
        new,
        old,
        judge="rule:switch-from-to",
        reason="Services move to EKS, managed Kubernetes.",
        entity=kubernetes,
    )
    hits = svc.recall("Where do we run k8s?", scope=project).hits
    assert [h.slug for h in hits][:2] == [new, old]
    assert hits[1].factors["superseded"] == 0.6
    assert hits[1].paths[0].startswith(f"superseded by {new} (the query names k8s)")


def test_a_question_asking_what_is_current_reaches_the_successor_with_evidence_of_its_own(
    svc: MemoryService, project: Path
) -> None:
    """cloud-platform's cp-02 (tests/data/supersede/records/): the record that replaced
    Concourse says "deployment pipelines" but not "CI/CD tool"; asked what runs the
    pipelines now, it goes above the record it replaced. Asked how things were, the stale
    record keeps its place, and a successor with no query word of its own never moves."""
    others(svc, project)
    concourse = rec(
        svc,
        project,
        "3 Use Concourse CI",
        "Concourse CI is the CI/CD tool that runs the platform deployment pipelines; "
        "CI/CD tool choice: Concourse over Jenkins.",
    )
    actions = rec(
        svc,
        project,
        "40 Use GitHub Actions",
        "We will switch to using GitHub Actions for our deployment pipelines.",
    )
    judged_edge(
        svc,
        actions,
        concourse,
        judge="rule:switch-to",
        reason="We will switch to using GitHub Actions for our deployment pipelines.",
        entity=None,
    )
    now = [
        h.slug
        for h in svc.recall("what CI/CD tool runs the deployment pipelines now", scope=project).hits
    ]
    assert now.index(actions) < now.index(concourse)
    then = [
        h.slug
        for h in svc.recall("what CI/CD tool runs the deployment pipelines", scope=project).hits
    ]
    assert then[0] == concourse
