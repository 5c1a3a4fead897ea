"""The alias lexicon (`data/aliases.jsonl`): short names engineers type, one entity per thing,
and the ambiguous ones only where their context says so."""

from __future__ import annotations

import pytest

from memoryd.extraction.linking import KnownEntity
from memoryd.extraction.pipeline import Extractor, LexiconEntry, load_lexicon, merge_aliases
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


# --- real-text misreadings (tests/data/entities/real_en.yaml) ---------------------------------


@pytest.mark.parametrize(
    ("text", "expected", "not_expected"),
    [
        ("Support for CoreDNS and Azure DNS", "tool:Azure DNS", "tool:Azure"),
        ("It configures AWS Route 53 or Google Cloud DNS.", "tool:Google Cloud DNS", "tool:GCP"),
        ("A hosted zone in Google CloudDNS.", "tool:Google CloudDNS", "organization:Google"),
        ("Logs go to AWS CloudWatch Logs.", "tool:Amazon CloudWatch", "tool:AWS CloudWatch Logs"),
        ("We run it all on AWS Regions near the users.", "tool:AWS", "tool:AWS Regions"),
    ],
)
def test_a_vendor_before_a_product_name_is_the_product(
    extractor: Extractor, text: str, expected: str, not_expected: str
) -> None:
    found = {f"{e.type.value}:{e.name}" for e in extractor.extract(text).entities}
    assert expected in found
    assert not_expected not in found


def test_a_company_before_style_is_a_style_guide(extractor: Extractor) -> None:
    text = "ESLint with Google code style, or Prettier with Airbnb style."
    found = {f"{e.type.value}:{e.name}" for e in extractor.extract(text).entities}
    assert "organization:Google" not in found
    assert {"tool:ESLint", "tool:Prettier"} <= found


@pytest.mark.parametrize(
    "text",
    [
        "[profile cp] sso_start_url=https://moj.awsapps.com/start sso_role_name=AdminAccess",
        "We are now offering users new Ingress Controllers that offer support for 1.3.",
        "The previous decision to adopt a Simplified Git Flow aimed at clearer releases.",
    ],
)
def test_settings_plural_nouns_and_parts_of_longer_names_are_no_entities(
    extractor: Extractor, text: str
) -> None:
    assert extractor.extract(text).entities == []


def test_a_cited_url_and_a_single_guessed_name_still_count(extractor: Extractor) -> None:
    found = ids(extractor, "See https://docs.example.org/guide/setup. We moved to Hetzner.")
    assert found == {"entity:concept:docs.example.org/guide/setup", "entity:tool:Hetzner"}
    assert ids(extractor, "We moved to Hetzner Cloud.") == set()  # a longer, unknown name


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Replace Jenkins with Concourse CI.", "Concourse"),
        ("Deploys run in Concourse.", "Concourse"),
        ("The pipeline moved to Buildkite.", "Buildkite"),
        ("Builds run on GitHub Actions.", "GitHub Actions"),
    ],
)
def test_the_cncf_landscape_ci_systems_are_entities_of_kind_ci(
    extractor: Extractor, text: str, name: str
) -> None:
    assert f"entity:tool:{name}" in ids(extractor, text)
    kinds = {e.name: e.kind for e in load_lexicon() if e.name == name}
    assert kinds == {name: "ci"}


def test_a_ci_system_named_by_an_everyday_noun_counts_only_as_its_name(
    extractor: Extractor,
) -> None:
    assert "entity:tool:Concourse" not in ids(extractor, "We met in the airport concourse.")
    kinds = {e.name: e.kind for e in load_lexicon() if e.name in {"Spinnaker", "Argo"}}
    assert kinds == {"Spinnaker": "cd", "Argo": "cd"}  # run beside a CI system, not one
