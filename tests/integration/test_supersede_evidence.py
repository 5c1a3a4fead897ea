"""Automatic supersedes only from evidence that names both sides (issue 27): the replaced
thing is a known name, an explicit status line names the other record, a memory that would
replace many at once waits for a human, and a data dir judged by older rules is repaired."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import Settings, load_settings
from memoryd.governance import status_lines, supersede
from memoryd.governance.supersede import judge_by_rules, name_of
from memoryd.models import MemoryDraft, Predicate, SupersedeDecision, SupersedeStatus
from memoryd.service import MemoryService
from memoryd.wiring import open_service
from tests.conftest import ENGINE


def draft(project: Path, title: str, body: str, day: int) -> MemoryDraft:
    return MemoryDraft.model_validate(
        {
            "type": "decision",
            "title": title,
            "body": body,
            "scope_path": project,
            "created_at": datetime(2026, 5, day, 9, 0, tzinfo=UTC),
        }
    )


def audit_events(home: Path, event_type: str) -> list[dict[str, Any]]:
    """The events of one type, each with its details as a dict."""
    lines = (home / "audit" / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    events = [e for e in map(json.loads, lines) if e["event_type"] == event_type]
    for event in events:
        if isinstance(event["details"], str):
            event["details"] = json.loads(event["details"])
    return events


def edges(svc: MemoryService) -> dict[tuple[str, str], tuple[str, str | None, int | None]]:
    rows = svc.graph.cypher(
        "MATCH (n:Memory)-[r:SUPERSEDES]->(o:Memory)"
        " RETURN n.slug, o.slug, r.status, r.judge, r.rules",
        {},
        limit=10_000,
    ).rows
    return {(n, o): (status, judge, rules) for n, o, status, judge, rules in rows}


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "newer",
    [
        # The sentences of real ADRs that made `rule:no-longer` and `rule:instead-of` write
        # edges about "be", "to", "have", "in" and "need" (issue 27).
        "Developers will no longer be able to merge without a review.",
        "We no longer need to keep a separate staging cluster.",
        "The team no longer has to rotate the keys by hand.",
        "Tests run in parallel instead of in sequence.",
        "We will not have to maintain our own fork.",
    ],
)
def test_a_word_after_no_longer_or_instead_of_is_not_a_replaced_thing(newer: str) -> None:
    older = "To be able to merge, we need to have a staging cluster in place and keys in the vault."
    assert judge_by_rules(newer, older) is None


def test_the_replaced_side_is_a_lexicon_name_a_known_tool_or_code_like() -> None:
    assert name_of("be able to deploy") is None
    assert name_of("Ref for reviews") is None
    assert name_of("deployments for reviews") is None  # an inflected English word
    assert name_of("Poetry for packaging") is not None
    fmtkit = supersede.Name("fmtkit", ("fmtkit",), "tool")
    assert name_of("fmtkit for tables", (fmtkit,)) == fmtkit
    # Not an English word, or written as code: a name memoryd need not know (issue 27).
    for slot, name in [
        ("fmtkit for tables", "fmtkit"),
        ("MobX stores", "MobX"),
        ("Chart.js for charts", "Chart.js"),
        ("`requests` in the services", "requests"),
    ]:
        found = name_of(slot)
        assert found is not None
        assert found.name == name
    assert name_of("fmtkit for tables", code=False) is None
    verdict = judge_by_rules(
        "We no longer use fmtkit; tables are rendered by hand.",
        "Tables are formatted with fmtkit.",
        (fmtkit,),
    )
    assert verdict is not None
    assert verdict.old == "fmtkit"


# --------------------------------------------------------------------------- status lines


@pytest.mark.parametrize(
    ("line", "kind", "number", "key"),
    [
        ("Status: Superseded by ADR-0036", "superseded-by", 36, None),
        ("Supersedes: 0004", "supersedes", 4, None),
        ("Superseded by [ADR 12](0012-use-postgres.md)", "superseded-by", 12, "use-postgres"),
        (
            "- Status: superseded by [20201016-use-the-adr-slug](20201016-use-the-adr-slug.md)",
            "superseded-by",
            None,
            "use-the-adr-slug",
        ),
        ("Replaced by ADR-7: Use Kafka", "superseded-by", 7, "use-kafka"),
        ("Deprecated in favour of ADR-0009", "superseded-by", 9, None),
        ("Amended by [5. Pin versions](0005-pin-versions.md)", "amended-by", 5, "pin-versions"),
        ("Amends ADR-3", "amends", 3, None),
        ("状态：已被 ADR-0005 取代", "superseded-by", 5, None),
        ("本决策取代 ADR-0003", "supersedes", 3, None),
        ("被 0012 修订", "amended-by", 12, None),
    ],
)
def test_status_lines_are_read_in_english_and_chinese(
    line: str, kind: str, number: int | None, key: str | None
) -> None:
    (found,) = status_lines.status_lines(f"# A record\n\n{line}\n\nSome context.")
    assert found.kind == kind
    (ref,) = found.refs
    assert (ref.number, ref.key) == (number, key)


def test_prose_that_counts_things_is_not_a_status_line() -> None:
    text = (
        "The nightly cron job was replaced by 2 services that poll the queue and write the"
        " results to the warehouse every few minutes."
    )
    assert status_lines.status_lines(text) == []


# --------------------------------------------------------------------------- the service


def test_status_lines_supersede_in_both_directions_and_amends_is_a_relation(
    svc: MemoryService, project: Path, home: Path
) -> None:
    # The older record says who replaces it before that record exists; a third amends it.
    first = svc.record(
        draft(
            project,
            "1. Record decisions in the wiki",
            "Status: Superseded by [2. Record decisions as ADRs](0002-record-decisions-as-adrs.md)"
            "\n\nWe keep decisions on the wiki.",
            1,
        )
    )
    assert edges(svc) == {}
    second, third = svc.record_many(
        [
            draft(project, "2. Record decisions as ADRs", "Status: accepted\n\nADRs in git.", 2),
            draft(
                project,
                "3. Number ADRs by date",
                "Status: accepted\n\nAmends [2. Record decisions as ADRs](0002-x.md)\n\nDates.",
                3,
            ),
        ]
    )
    assert edges(svc) == {
        (second.slug, first.slug): ("active", "rule:status-line", supersede.RULES_VERSION)
    }
    assert second.meta.supersedes == [first.slug]  # the result shows what judging wrote
    (decision,) = second.meta.supersede_decisions
    assert decision.reason is not None
    assert "Superseded by [2. Record" in decision.reason
    (amends,) = svc.get(third.slug).meta.relations
    assert (amends.predicate, amends.object, amends.label) == (
        Predicate.CITES,
        second.slug,
        "amends",
    )
    assert svc.graph.superseded_by([second.slug]) == {}  # amended, not replaced
    details = [e["details"] for e in audit_events(home, "supersede")]
    assert any(d["amends"] == [second.slug] for d in details)


def test_a_memory_that_would_replace_many_at_once_is_a_candidate(
    svc: MemoryService, project: Path
) -> None:
    tools = ["Jenkins", "Travis CI", "CircleCI"]
    olders = svc.record_many(
        [
            draft(project, f"CI {i}", f"CI for service {i} runs on {t}.", 1 + i)
            for i, t in enumerate(tools)
        ]
    )
    newer = svc.record(
        draft(
            project,
            "One CI",
            "We no longer use Jenkins. We no longer use Travis CI. We no longer use CircleCI."
            " Everything builds on GitHub Actions.",
            9,
        )
    )
    got = edges(svc)
    assert {got[(newer.slug, o.slug)][0] for o in olders} == {"candidate"}


def old_rules_decision(older: str, judge: str, status: SupersedeStatus) -> SupersedeDecision:
    """A decision as the rules before version 2 wrote it (no `rules` field)."""
    return SupersedeDecision(
        older=older,
        status=status,
        confidence=0.9,
        decided_by="auto",
        decided_at=datetime(2026, 5, 9, tzinfo=UTC),
        judge=judge,
        reason="rule no-longer: the newer memory no longer uses be",
    )


def test_automatic_decisions_of_older_rules_are_judged_again_on_open(
    settings: Settings, project: Path, home: Path
) -> None:
    svc = open_service(settings)
    try:
        jest, keys, review = svc.record_many(
            [
                draft(project, "Tests", "Unit tests run with Jest.", 1),
                draft(project, "Keys", "To be safe, keys are rotated by the on-call engineer.", 2),
                draft(project, "Review", "Every change needs one review to be merged.", 3),
            ]
        )
        newer = svc.record(
            draft(
                project,
                "Vitest",
                "Tests now use Vitest instead of Jest. Merges will no longer be blocked.",
                4,
            )
        )
        # What the older rules wrote: one true edge, two about the word "be", and a person's
        # decision that must stay whatever the rules say now.
        old = svc._load(newer.slug)
        decisions = [
            old_rules_decision(jest.slug, "rule:instead-of", SupersedeStatus.ACTIVE),
            old_rules_decision(keys.slug, "rule:no-longer", SupersedeStatus.ACTIVE),
            old_rules_decision(review.slug, "rule:no-longer", SupersedeStatus.CANDIDATE),
        ]
        edited = svc._edited(old, supersede.with_decisions(old, decisions), old.path)
        svc._replace_everywhere(old, edited, event_type="supersede", details={})
        by_hand = svc.record(draft(project, "Keys again", "Keys are rotated by a cron job.", 5))
        old = svc._load(by_hand.slug)
        human = old_rules_decision(keys.slug, "rule:no-longer", SupersedeStatus.ACTIVE)
        human = human.model_copy(update={"decided_by": "user"})
        edited = svc._edited(old, supersede.with_decisions(old, [human]), old.path)
        svc._replace_everywhere(old, edited, event_type="supersede", details={})
        before = len(audit_events(home, "supersede"))
    finally:
        svc.close()

    svc = open_service(settings)
    try:
        got = edges(svc)
        assert got[(newer.slug, jest.slug)] == ("active", "rule:instead-of", 2)
        assert (newer.slug, keys.slug) not in got
        assert (newer.slug, review.slug) not in got
        assert got[(by_hand.slug, keys.slug)] == ("active", "rule:no-longer", None)  # a person's
        events = audit_events(home, "supersede")
        (repair,) = events[before:]
        outcomes = {r["older"]: r["now"] for r in repair["details"]["rejudged"]}
        assert outcomes == {jest.slug: "kept", keys.slug: "removed", review.slug: "removed"}
        assert svc.get(newer.slug).meta.supersede_decisions[0].rules == 2
        rows = svc.automatic_supersedes()
        assert [(r.newer, r.older, r.judge, r.rules) for r in rows] == [
            (newer.slug, jest.slug, "rule:instead-of", 2)
        ]
        svc.reindex()
        assert edges(svc) == got  # the rules version comes back from the files
    finally:
        svc.close()

    svc = open_service(settings)  # nothing is owed now: nothing is written
    try:
        assert svc.repair_supersedes() == 0
        assert len(audit_events(home, "supersede")) == before + 1
    finally:
        svc.close()


def test_cli_lists_the_automatic_decisions_with_rule_and_evidence(
    svc: MemoryService, project: Path, home: Path
) -> None:
    svc.record(draft(project, "Tests", "Unit tests run with Jest.", 1))
    svc.record(draft(project, "Vitest", "Tests now use Vitest instead of Jest.", 2))
    svc.close()
    result = CliRunner().invoke(app, ["supersede", "list", "--auto", "--json", "--home", str(home)])
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    result = CliRunner().invoke(app, ["supersede", "list", "--auto", "--home", str(home)])
    assert "rule:instead-of" in result.stdout
    assert (row["judge"], row["rules"], row["status"]) == ("rule:instead-of", 2, "active")
    assert "Jest" in row["reason"]


def test_sync_import_judges_what_it_adds_and_reports_it(tmp_path: Path, project: Path) -> None:
    out = tmp_path / "memories.json"
    settings_a = load_settings(tmp_path / "a", graph={"engine": ENGINE, "buffer_pool_mb": 128})
    settings_b = load_settings(tmp_path / "b", graph={"engine": ENGINE, "buffer_pool_mb": 128})
    b = open_service(settings_b)
    try:
        older = b.record(draft(project, "Tests", "Unit tests run with Jest.", 1))
    finally:
        b.close()
    a = open_service(settings_a)
    try:
        newer = a.record(draft(project, "Vitest", "Tests now use Vitest instead of Jest.", 2))
        a.sync_export(out)
    finally:
        a.close()
    b = open_service(settings_b)
    try:
        report = b.sync_import(out)
        assert report.added == [newer.slug]
        assert report.superseded == 1
        assert b.graph.superseded_by([older.slug]) == {older.slug: newer.slug}
        again = b.sync_import(out)
        assert (again.added, again.superseded) == ([], 0)
    finally:
        b.close()


# --------------------------------------------------------------------------- a CI system

CONCOURSE = (
    "Use Concourse CI. The team runs a self-hosted Jenkins server for CI/CD. Replace self"
    " hosted Jenkins with self hosted Concourse CI pipelines."
)
GITHUB_ACTIONS = (
    "Use GitHub Actions. Cloud Platform uses a self managed Concourse instance for its"
    " deployment pipelines. We will switch to using GitHub Actions for our deployment"
    " pipelines. We will decommission our Concourse pipelines once the move is done."
)


def test_switching_ci_system_replaces_the_record_that_chose_the_old_one() -> None:
    # cloud-platform ADR 040 -> 003 (issue 27): the older record moved from Jenkins to
    # Concourse, so Concourse is its one CI system; the newer names Concourse only as what
    # it retires.
    verdict = judge_by_rules(GITHUB_ACTIONS, CONCOURSE)
    assert verdict is not None
    assert (verdict.judge, verdict.old) == ("rule:switch-to", "Concourse")
    assert verdict.confidence >= Settings().supersede.auto_threshold


@pytest.mark.parametrize(
    "older",
    [
        # named on the way, not chosen (cloud-platform ADRs 027 and 008)
        "AWS Console access for users. A Concourse pipeline creates the roles and permissions.",
        "Support deployments from third party CI. Product teams can still use Concourse CI,"
        " but do not depend on it to get their applications deployed.",
    ],
)
def test_switching_ci_system_leaves_records_that_only_use_the_old_one(older: str) -> None:
    assert judge_by_rules(GITHUB_ACTIONS, older) is None


def test_switching_ci_system_while_keeping_the_old_one_replaces_nothing() -> None:
    newer = "Use GitHub Actions. We will switch to GitHub Actions for builds; Concourse stays."
    verdict = judge_by_rules(newer, CONCOURSE)
    assert verdict is None or verdict.confidence < Settings().supersede.auto_threshold
    assert verdict is None or verdict.judge != "rule:switch-to"


def test_the_older_record_sharing_the_replaced_tool_is_judged_before_newer_ones(
    settings: Settings, project: Path
) -> None:
    # More newer records than `max_pairs` share only Kubernetes with the newest one: the
    # record that shares Concourse with it is still among the pairs judged.
    limited = settings.model_copy(
        update={"supersede": settings.supersede.model_copy(update={"max_pairs": 2})}
    )
    svc = open_service(limited)
    try:
        concourse = svc.record(draft(project, "Use Concourse CI", CONCOURSE, 1))
        svc.record_many(
            [
                draft(project, f"Cluster {i}", f"Cluster {i} runs on Kubernetes.", 2 + i)
                for i in range(3)
            ]
        )
        newer = svc.record(
            draft(project, "Use GitHub Actions", GITHUB_ACTIONS + " It deploys to Kubernetes.", 9)
        )
        assert edges(svc)[(newer.slug, concourse.slug)][:2] == ("active", "rule:switch-to")
    finally:
        svc.close()


@pytest.mark.parametrize(
    ("newer", "older", "replaced"),
    [
        # a role has one choice: a different test runner or browser driver replaces the old one
        ("We use Vitest for the unit tests.", "We use Jest for the unit tests.", "Jest"),
        (
            "We use Cypress for the end-to-end tests.",
            "We use Playwright for the end-to-end tests.",
            "Playwright",
        ),
        # tools of different roles run side by side: running Playwright keeps pnpm, and Ruff
        # beside Black replaces nothing (both pairs were one "build-tool" kind before)
        (
            "Session: migrate cart and checkout to Solid, remove React\n\n**Commands:** `pnpm"
            " build`, `pnpm playwright test` (all 64 tests green).",
            "Use pnpm, never npm or yarn\n\nThe frontend uses pnpm; the lockfile is"
            " `web/pnpm-lock.yaml`. Agents must run `pnpm install --frozen-lockfile` and must"
            " not create `package-lock.json` or `yarn.lock`.",
            None,
        ),
        ("We use Ruff for linting.", "We use Black to format the code.", None),
    ],
)
def test_a_single_valued_choice_is_one_per_role(
    newer: str, older: str, replaced: str | None
) -> None:
    verdict = supersede.judge_by_rules(newer, older)
    assert (verdict.old if verdict else None) == replaced
    if verdict is not None:
        assert verdict.judge == "rule:single-valued"
        assert verdict.confidence < 0.85  # a candidate for a human, never automatic


# --------------------------------------------------------------------------- real records' wording


def test_a_record_that_retires_what_an_older_record_is_about_replaces_it() -> None:
    # cloud-platform 040 and 033 (tests/data/supersede/records/).
    older = "33 Manager cluster\n\nWe have a 'Manager cluster', for running CI/CD (Concourse)."
    newer = (
        "36. Use GitHub Actions\n\nWe will switch to using GitHub Actions for our pipelines.\n\n"
        "- We will decomission our management cluster once the move has been completed"
    )
    verdict = judge_by_rules(newer, older)
    assert verdict is not None
    assert (verdict.judge, verdict.confidence >= supersede.Tiers().auto) == (
        "rule:retires-record",
        True,
    )
    # A part of the title is not the record: "Concourse pipelines" is not "Concourse CI".
    assert (
        judge_by_rules(
            "Later\n\nWe will decommission our Concourse pipelines next year.",
            "3 Use Concourse CI\n\nWe run our builds elsewhere.",
        )
        is None
    )
    # Considered is not done.
    assert judge_by_rules(newer.replace("We will", "We might"), older) is None


def test_a_title_choosing_what_an_older_decision_declined_replaces_it() -> None:
    # cloud-platform 022 and 014.
    older = (
        "Why we build our own kubernetes cluster\n\nWe decided to manage the kubernetes"
        " cluster ourselves rather than using EKS mainly for the below reasons."
    )
    verdict = judge_by_rules("EKS\n\nUse Amazon EKS for running the main cluster.", older)
    assert verdict is not None
    assert verdict.judge == "rule:adopts-declined"
    # A title about a part of the declined thing does not reverse the decision.
    assert judge_by_rules("Use a private EKS endpoint\n\nThe endpoint is private.", older) is None


def test_a_contrast_names_the_new_side_next_to_it_not_anywhere_in_the_clause() -> None:
    # cloud-platform 023: neither "react" nor "logs" is a replaced tool.
    newer = (
        "To quickly react to threats, we need to be able to do a quick search across the"
        " platform's logs for an IP or URL pattern, rather than logs de-centralized."
    )
    assert judge_by_rules(newer, "Logs are shipped to Elasticsearch; teams read logs.") is None
    verdict = judge_by_rules(
        "Use httpx instead of requests in all Python services.",
        "HTTP client in the Python services is requests.",
    )
    assert verdict is not None
    assert verdict.old == "requests"


def test_until_now_with_a_link_to_a_record_supersedes_it() -> None:
    # backstage ADR014 naming ADR013, the sentence wrapped over two lines.
    text = (
        "## Context\n\nUntil now we have been recommending the use of `node-fetch` in Node.js"
        " contexts\nthrough [ADR013](./adr013-use-node-fetch.md). Since then, Node.js has fetch."
    )
    (found,) = status_lines.status_lines(text)
    assert found.kind == "supersedes"
    assert found.refs[0].key == "use-node-fetch"


def test_a_planned_move_is_carried_out_by_the_successor_of_the_record_it_names() -> None:
    # cloud-platform 012 plans to move on to 021; 021 was itself superseded by 036.
    records = [
        status_lines.Record(
            "s012",
            "One cluster for dev/staging/prod",
            "**May 2021 Update** We're looking to move on from this ADR decision, and have"
            " different clusters - see [021-Multi-cluster](https://x.org/021-Multi-cluster.md)",
        ),
        status_lines.Record(
            "s021",
            "21 Multi-cluster",
            "⌛️ Superseded by [036. Multi-cluster](036-multi-cluster.md)",
        ),
        status_lines.Record("s036", "36. Multi-cluster", "We have decided to adopt multi-cluster"),
    ]
    found = {(link.newer, link.older) for link in status_lines.links(records)}
    assert found == {("s036", "s021"), ("s036", "s012")}
    # While the named record still holds, a plan is only a plan.
    found = {(link.newer, link.older) for link in status_lines.links(records[:1] + records[2:])}
    assert found == set()


def test_a_stray_alias_entity_is_merged_into_the_lexicons_entity_on_open(
    settings: Settings, project: Path, home: Path
) -> None:
    """A data dir where an older extraction made "K8s" an entity beside "Kubernetes"
    (issue 27: "k8s" named two entities): opening it merges the stray into the alias
    lexicon's entity, audited, and a memory that named the stray is found through the one."""
    svc = open_service(settings)
    try:
        hosted = svc.record(draft(project, "Hosting", "Services run on Kubernetes.", 1))
        assert "entity:tool:Kubernetes" in hosted.meta.observations
        # What the older extraction wrote: the alias as an entity of its own.
        stray = svc.record_graph_facts(
            draft(project, "Cluster", "The K8s cluster is upgraded twice a year.", 2),
            entity_ids=["entity:tool:K8s"],
        )
        assert svc.graph.get_entity("entity:tool:K8s") is not None
    finally:
        svc.close()

    svc = open_service(settings)
    try:
        assert svc.graph.get_entity("entity:tool:K8s") is None
        kubernetes = svc.graph.get_entity("entity:tool:Kubernetes")
        assert kubernetes is not None
        assert "K8s" in kubernetes.aliases
        mentioning = {slug for _, slug, _ in svc.graph.mentioning(["entity:tool:Kubernetes"])}
        assert {hosted.slug, stray.slug} <= mentioning
        (merge,) = audit_events(home, "entity_merge")
        assert merge["details"] == {"drop": "entity:tool:K8s", "by": "alias-lexicon"}
        svc.reindex()  # the files still name the stray: the audited merge is replayed
        assert svc.graph.get_entity("entity:tool:K8s") is None
    finally:
        svc.close()

    svc = open_service(settings)  # nothing is owed now: nothing is written
    try:
        assert svc.repair_stray_entities() == 0
        assert len(audit_events(home, "entity_merge")) == 1
    finally:
        svc.close()


def test_a_name_known_only_by_its_shape_must_be_chosen_by_the_older_memory() -> None:
    # backstage ADR007 against ADR003 (a shared home): "codebase" is no tool ADR003 chose.
    newer = "- Gradually will replace the codebase with `msw`"
    assert (
        judge_by_rules(newer, "Manual codebase searching is easier with a unique symbol.") is None
    )
    verdict = judge_by_rules(
        "Switched the dashboard charts from Chart.js to ECharts.",
        "Charts on the dashboard are drawn with Chart.js.",
    )
    assert verdict is not None
    assert verdict.old == "Chart.js"
