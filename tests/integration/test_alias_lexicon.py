"""The alias lexicon end to end on a real Kuzu graph: the names engineers type ("k8s", "K8s",
"EKS", "SBOM", "CI") become one entity per thing, and `entity alias` can teach them more."""

from __future__ import annotations

from pathlib import Path

from memoryd.models import MemoryDraft
from memoryd.service import MemoryService


def _record(svc: MemoryService, project: Path, title: str, body: str) -> str:
    draft = MemoryDraft.model_validate(
        {"type": "decision", "title": title, "body": body, "scope_path": project}
    )
    return svc.record(draft).slug


def _mentioned(svc: MemoryService, slug: str) -> set[str]:
    rows = svc.cypher(
        "MATCH (m:Memory {slug: $slug})-[:MENTIONS]->(e:Entity) RETURN e.id", {"slug": slug}
    ).rows
    return {str(row[0]) for row in rows}


def test_short_names_become_one_entity_per_thing(svc: MemoryService, project: Path) -> None:
    first = _record(
        svc,
        project,
        "Run the platform on EKS",
        "Staging runs on k8s today; the K8s manifests move to Amazon EKS in March. Images are "
        "pushed to ECR by GHA, every release ships an SBOM, TLS ends at the load balancer, "
        "and CI must stay under ten minutes.",
    )
    second = _record(
        svc, project, "Kubernetes upgrade", "Upgrade Kubernetes to 1.31 before the EKS deadline."
    )

    tools = {e.name: e for e in svc.entities(type="tool", limit=1000)}
    assert "K8s" not in tools
    assert "k8s" not in tools
    assert "Kubernetes" in tools
    expected = {
        "entity:tool:Kubernetes",
        "entity:tool:Amazon EKS",
        "entity:tool:Amazon ECR",
        "entity:tool:GitHub Actions",
        "entity:concept:SBOM",
        "entity:concept:TLS",
        "entity:concept:Continuous integration",
    }
    assert expected <= _mentioned(svc, first)
    assert {"entity:tool:Kubernetes", "entity:tool:Amazon EKS"} <= _mentioned(svc, second)
    for typed, entity_id in [
        ("k8s", "entity:tool:Kubernetes"),
        ("K8s", "entity:tool:Kubernetes"),
        ("EKS", "entity:tool:Amazon EKS"),
        ("ECR", "entity:tool:Amazon ECR"),
        ("GHA", "entity:tool:GitHub Actions"),
        ("CI", "entity:concept:Continuous integration"),
    ]:
        assert svc.resolve_entity(typed).id == entity_id, typed


def test_entity_alias_teaches_a_lexicon_entity_a_new_name(
    svc: MemoryService, project: Path
) -> None:
    _record(svc, project, "Supply chain", "Each release attaches an SBOM signed with cosign.")
    taught = svc.alias_entity("SBOM", "bill of materials")
    assert taught.id == "entity:concept:SBOM"
    assert "bill of materials" in taught.aliases

    later = _record(
        svc, project, "Release checklist", "Check that the bill of materials lists every wheel."
    )
    assert "entity:concept:SBOM" in _mentioned(svc, later)
    assert svc.resolve_entity("bill of materials").id == "entity:concept:SBOM"


def test_an_ambiguous_short_name_needs_its_context(svc: MemoryService, project: Path) -> None:
    infra = _record(svc, project, "Infra", "TF plan runs in CI before every apply.")
    model = _record(svc, project, "Model", "The TF model trains on the GPU box overnight.")
    assert "entity:tool:Terraform" in _mentioned(svc, infra)
    assert "entity:tool:Terraform" not in _mentioned(svc, model)
