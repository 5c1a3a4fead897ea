"""Extraction precision on coding text: the labelled set's targets, and each known misreading
(issue 13: "Solid flow.", "local dev", "lockfile", `proxy_pass http://api`, "cluster";
issue 12: "lockfile" read as a library)."""

from __future__ import annotations

import pytest

from memoryd.extraction.linking import KnownEntity, normalise_name, query_name_grams
from memoryd.extraction.pipeline import Extractor
from memoryd.graph.store import EntityRow
from memoryd.recall import EntityMatcher
from tests.entity_gold import (
    DATA_DIR,
    LANGUAGES,
    PRECISION_TARGET,
    REAL_PRECISION_TARGET,
    RECALL_TARGET,
    SPLITS,
    load_items,
    load_real_items,
    score,
)


@pytest.fixture(scope="module")
def extractor() -> Extractor:
    return Extractor()


def names(extractor: Extractor, text: str, known: list[KnownEntity] | None = None) -> set[str]:
    return {f"{e.type.value}:{e.name}" for e in extractor.extract(text, known=known or []).entities}


# --- the labelled set ---------------------------------------------------------------------


def test_labelled_set_is_large_and_in_both_languages() -> None:
    items = load_items()
    assert len(items) >= 150
    assert {item.lang for item in items} == set(LANGUAGES)
    assert sum(1 for item in items if not item.gold) >= 20  # sentences with no entity at all


def test_labelled_set_meets_the_precision_and_recall_targets(extractor: Extractor) -> None:
    scores = score(extractor, load_items())
    for key in (*LANGUAGES, "all"):
        s = scores[key]
        assert s.precision >= PRECISION_TARGET, (key, s.as_json(), s.false)
        assert s.recall >= RECALL_TARGET, (key, s.as_json(), s.misses)


def test_real_part_is_taken_from_listed_sources_and_split() -> None:
    items = load_real_items()
    assert len(items) >= 100
    assert {item.split for item in items} == set(SPLITS)
    assert sum(1 for item in items if item.split == "held-out") >= len(items) // 4
    sources = (DATA_DIR / "SOURCES.md").read_text(encoding="utf-8")
    for item in items:
        key = item.source.split(":", 1)[0]
        assert f"| {key} |" in sources, item.source


def test_real_part_meets_the_precision_target(extractor: Extractor) -> None:
    for split in (*SPLITS, None):
        s = score(extractor, load_real_items((split,) if split else SPLITS))["all"]
        assert s.precision >= REAL_PRECISION_TARGET, (split, s.as_json(), s.false)


# --- "Solid flow.": an everyday word opening a sentence is no name without evidence --------


@pytest.mark.parametrize(
    "text",
    [
        "Solid flow. Let's keep the retry logic as it is.",
        "Solid flow,重试逻辑保持现状就行。",
        "Click the Deploy button, then watch the logs.",
        "Express the limit as a setting.",
        "Go ahead and merge it once the build is green.",
    ],
)
def test_everyday_word_opening_a_sentence_is_no_library(extractor: Extractor, text: str) -> None:
    assert names(extractor, text) == set()


@pytest.mark.parametrize(
    ("text", "entity"),
    [
        ("We moved the dashboard from React to Solid.", "library:Solid"),
        ("Solid is smaller than React for this page.", "library:Solid"),
        ("Solid flow. The admin UI moves to Solid next week.", "library:Solid"),
        ("Black is the formatter here.", "tool:Black"),
        ("Go 1.22 fixed the loop variable capture.", "tool:Go"),
    ],
)
def test_everyday_word_with_evidence_is_the_name(
    extractor: Extractor, text: str, entity: str
) -> None:
    assert entity in names(extractor, text)


# --- "local dev": an install command ends at its line --------------------------------------


def test_local_dev_and_a_dev_script_name_no_library(extractor: Extractor) -> None:
    assert names(extractor, "Run it against local dev first, then staging.") == set()
    found = names(extractor, "```bash\nbun install\nbun dev     # Next.js dev server\n```")
    assert "library:dev" not in found
    assert {"tool:Bun", "library:Next.js"} <= found


# --- "lockfile" (issue 12): a registry name made of everyday words needs evidence -----------


@pytest.mark.parametrize(
    "text",
    [
        "Delete the lockfile and run the install again.",
        "CI fails because the lockfile is out of date with package.json.",
        "RUN corepack enable && pnpm install --frozen-lockfile",
        "删掉 lockfile 重新装一遍依赖。",
    ],
)
def test_lockfile_in_prose_is_no_library(extractor: Extractor, text: str) -> None:
    assert "library:lockfile" not in names(extractor, text)


@pytest.mark.parametrize(
    "text",
    ["pip install lockfile", "import lockfile", "Pinned `lockfile` to the old release."],
)
def test_lockfile_named_by_code_is_the_package(extractor: Extractor, text: str) -> None:
    assert "library:lockfile" in names(extractor, text)


# --- proxy_pass http://api: a host that is not public is no entity --------------------------


@pytest.mark.parametrize(
    "text",
    [
        "location / { proxy_pass http://api; }",
        "upstream api { server app:8000; }\nlocation / { proxy_pass http://api:8000/; }",
        "The app talks to http://db:5432 and http://localhost:6379/0 and http://10.0.0.4/health.",
    ],
)
def test_local_hosts_in_urls_are_no_entities(extractor: Extractor, text: str) -> None:
    assert names(extractor, text) == set()


def test_public_urls_stay_cited(extractor: Extractor) -> None:
    found = names(extractor, "See https://docs.djangoproject.com/en/5.0/ref/settings/ first.")
    assert found == {"concept:docs.djangoproject.com/en/5.0/ref/settings"}


# --- "ecommerce-api" never names "api" ------------------------------------------------------

API = KnownEntity(id="entity:concept:api", name="api", type="concept")


def test_part_of_a_hyphenated_identifier_is_no_mention(extractor: Extractor) -> None:
    assert names(extractor, "Deploy ecommerce-api to staging.", [API]) == set()
    assert names(extractor, "Use date-fns-tz for the time zones.") == set()
    assert "library:React" in names(extractor, "A React-based admin page.")


def test_query_grams_keep_identifiers_whole_and_skip_everyday_words() -> None:
    grams = query_name_grams(
        "How do we deploy the ecommerce-api to the cluster?",
        ["how", "do", "we", "deploy", "the", "ecommerce", "api", "to", "the", "cluster"],
        max_words=2,
    )
    assert "ecommerce-api" in grams
    assert not {"api", "ecommerce", "cluster", "deploy", "the"} & set(grams)
    assert "Solid" in query_name_grams("Do we still use Solid?")
    assert "solid" not in query_name_grams("is the plan solid?")
    assert {"记忆引擎", "数据库"} <= set(
        query_name_grams("记忆引擎用什么数据库", ["记忆", "引擎", "用", "什么", "数据库"])
    )


def entity(name: str, type_: str) -> EntityRow:
    return EntityRow(id=f"entity:{type_}:{name}", name=name, type=type_)


def test_entity_matcher_links_names_not_common_words() -> None:
    rows = [
        entity("api", "concept"),
        entity("ecommerce-api", "project"),
        entity("cluster", "tool"),
        entity("AWS", "tool"),
    ]
    matcher = EntityMatcher(rows, normalise_name)
    segments = ["which", "cluster", "runs", "ecommerce", "api", "on", "aws"]
    linked = matcher.match("Which cluster runs ecommerce-api on aws?", segments)
    assert set(linked) == {"entity:project:ecommerce-api", "entity:tool:AWS"}


# --- "cluster": a common word is no tool ---------------------------------------------------


def test_cluster_is_no_tool(extractor: Extractor) -> None:
    assert names(extractor, "The cluster ran out of memory during the reindex.") == set()
    assert names(extractor, "We scaled the EKS cluster on AWS.") == {"tool:AWS", "tool:Amazon EKS"}
    known = [KnownEntity(id="entity:tool:cluster", name="cluster", type="tool")]
    [hit] = extractor.extract("The cluster ran out of memory.", known=known).entities
    assert hit.confidence < 0.7  # a graph entity named by jargon links only weakly


def test_a_project_named_by_a_compound_still_links() -> None:
    """`lockfile`-like compounds count against registry names, not against the user's own."""
    assert "webshop" in query_name_grams("what broke in webshop yesterday?")
    matcher = EntityMatcher([entity("webshop", "project")], normalise_name)
    assert set(matcher.match("what broke in webshop yesterday?", [])) == {"entity:project:webshop"}
