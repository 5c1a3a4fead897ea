"""The alias lexicon (`data/aliases.jsonl`): short names engineers type, one entity per thing,
and the ambiguous ones only where their context says so."""

from __future__ import annotations

import pytest

from memoryd.extraction.pipeline import (
    Extractor,
    KnownEntity,
    LexiconEntry,
    load_lexicon,
    merge_aliases,
)
from memoryd.models import EntityType


@pytest.fixture(scope="module")
def extractor() -> Extractor:
    return Extractor()


def ids(extractor: Extractor, text: str, known: list[KnownEntity] | None = None) -> set[str]:
    return {e.id for e in extractor.extract(text, known=known or []).entities}


@pytest.mark.parametrize(
    ("text", "entity"),
    [
        ("Staging runs on k8s.", "entity:tool:Kubernetes"),
        ("The K8s manifests live in deploy/.", "entity:tool:Kubernetes"),
        ("We moved from K8S to Nomad.", "entity:tool:Kubernetes"),
        ("Images are pushed to ECR on every merge.", "entity:tool:Amazon ECR"),
        ("We scaled the EKS node group.", "entity:tool:Amazon EKS"),
        ("The deploy workflow runs on GHA.", "entity:tool:GitHub Actions"),
        ("Every release ships an SBOM.", "entity:concept:SBOM"),
        ("Caddy terminates TLS.", "entity:concept:TLS"),
        ("Merge once CI is green.", "entity:concept:Continuous integration"),
        ("The CI/CD pipeline deploys on tag.", "entity:concept:CI/CD"),
        ("Run TF plan before apply.", "entity:tool:Terraform"),
        ("pg holds the orders table.", "entity:tool:PostgreSQL"),
    ],
)
def test_the_names_engineers_type_become_entities(
    extractor: Extractor, text: str, entity: str
) -> None:
    assert entity in ids(extractor, text)


@pytest.mark.parametrize(
    ("text", "entity"),
    [
        ("The TF model trains overnight on the GPU box.", "entity:tool:Terraform"),
        ("ES modules load faster than CommonJS here.", "entity:tool:Elasticsearch"),
        ("Copy the files to pg 12 of the report.", "entity:tool:PostgreSQL"),
        ("The SNS ruling was reported on the news.", "entity:tool:Amazon SNS"),
    ],
)
def test_an_ambiguous_short_name_needs_a_cue_in_the_text(
    extractor: Extractor, text: str, entity: str
) -> None:
    assert entity not in ids(extractor, text)


def test_a_known_entity_keeps_the_cues_of_its_lexicon_surface(extractor: Extractor) -> None:
    terraform = KnownEntity(
        id="entity:tool:Terraform", name="Terraform", type="tool", aliases=["TF"]
    )
    assert "entity:tool:Terraform" not in ids(
        extractor, "The TF model trains overnight.", [terraform]
    )
    assert "entity:tool:Terraform" in ids(
        extractor, "TF apply failed on the state lock.", [terraform]
    )


def test_spellings_of_one_thing_are_one_entity(extractor: Extractor) -> None:
    found = extractor.extract("k8s at home, K8s at work, Kubernetes everywhere.").entities
    assert [e.id for e in found] == ["entity:tool:Kubernetes"]


def test_each_surface_names_one_entry() -> None:
    owners: dict[str, set[str]] = {}
    for entry in load_lexicon():
        for surface in (entry.name, *entry.aliases):
            owners.setdefault(surface, set()).add(entry.name)
    assert {s: o for s, o in owners.items() if len(o) > 1} == {}


def test_merge_adds_to_an_entry_of_the_same_name_and_places_new_ones_before_registries() -> None:
    def entry(name: str, source: str, *aliases: str) -> LexiconEntry:
        return LexiconEntry(name, EntityType.TOOL, aliases, source, frozenset())

    lexicon = [entry("Kubernetes", "curated", "k8s"), entry("ecr", "pypi")]
    rows = [entry("Kubernetes", "curated", "K8s"), entry("Amazon ECR", "botocore", "ECR")]
    merged = merge_aliases(lexicon, rows)
    assert [e.name for e in merged] == ["Kubernetes", "Amazon ECR", "ecr"]
    assert merged[0].aliases == ("k8s", "K8s")
