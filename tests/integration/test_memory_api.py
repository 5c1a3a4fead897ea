"""`MemoryAPI` is one contract: the in-process service and the daemon's client offer every
method with the same signature, and one scenario answers the same through both, field by
field. `memoryd.open()` picks between them."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import memoryd
from memoryd.client.remote import RemoteService
from memoryd.errors import MemorydError
from memoryd.models import GraphFact, MemoryDraft, MemoryType, Predicate, RelationRef
from memoryd.protocol import MemoryAPI
from memoryd.service import MemoryService
from tests.daemon_harness import running

SLUG = re.compile(r"\d{4}-\d\d-\d\d-[a-z0-9-]+-[0-9a-f]{6}")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|\+00:00)?")
HASH = re.compile(r"sha256:[0-9a-f]{64}")
SOLID, APP = "entity:library:Solid", "entity:project:app"
LIFECYCLE = {"close", "__enter__", "__exit__"}


def members() -> list[str]:
    return sorted(
        name
        for name, value in vars(MemoryAPI).items()
        if callable(value) and (not name.startswith("_") or name in LIFECYCLE)
    )


@pytest.fixture(autouse=True)
def _small_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemons inherit the environment: keep their buffer pools small."""
    monkeypatch.setenv("MEMORYD_GRAPH__BUFFER_POOL_MB", "128")


@pytest.mark.parametrize("cls", [MemoryService, RemoteService])
@pytest.mark.parametrize("name", sorted(set(members()) - {"__exit__"}))
def test_each_implementation_has_the_protocols_signature(cls: type, name: str) -> None:
    """mypy checks the types statically (both subclass MemoryAPI); this checks the names,
    kinds and defaults at run time."""

    def shape(fn: Any) -> list[tuple[str, Any, Any]]:
        params = inspect.signature(fn).parameters.values()
        return [(p.name, p.kind, p.default) for p in params]

    assert shape(getattr(cls, name)) == shape(getattr(MemoryAPI, name))


class Recorder:
    """A MemoryAPI wrapper that notes which methods the scenario called."""

    def __init__(self, api: MemoryAPI) -> None:
        self.api = api
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        self.called.add(name)
        method: Callable[..., Any] = getattr(self.api, name)
        return method


def failures(*calls: tuple[str, Callable[[], Any]]) -> Iterator[tuple[str, Any]]:
    """Each call's error as (step, (error class, message)), or "no error"."""
    for name, call in calls:
        try:
            call()
        except MemorydError as exc:
            yield name, (type(exc).__name__, exc.message)
        else:
            yield name, "no error"


def scenario(api: MemoryAPI, project: Path) -> Iterator[tuple[str, Any]]:
    """Every protocol method once or more, errors included, as (step, answer)."""
    rec: Any = Recorder(api)

    def draft(title: str, body: str, type: MemoryType = MemoryType.FACT) -> MemoryDraft:
        return MemoryDraft(type=type, title=title, body=body, scope_path=project)

    first = rec.record(draft("Prefer ruff", "Use ruff for lint and format.", MemoryType.DECISION))
    yield "record", first
    uses = RelationRef(predicate=Predicate.USES, subject=APP, object=SOLID)
    facts = rec.record_graph_facts(
        draft("App uses Solid", "The app is built on Solid."),
        entity_ids=[APP, SOLID],
        relations=[uses],
    )
    yield "record_graph_facts", facts
    yield (
        "record_graph_facts_many",
        rec.record_graph_facts_many(
            [
                GraphFact(draft=draft("Solid has signals", "Solid: signals"), entity_ids=[SOLID]),
                GraphFact(
                    draft=draft("app cites Solid", "app cites Solid"),
                    entity_ids=[APP, SOLID],
                    relations=[RelationRef(predicate=Predicate.CITES, subject=APP, object=SOLID)],
                ),
            ]
        ),
    )
    yield (
        "record_graph_facts_brief",
        rec.record_graph_facts_brief(
            [GraphFact(draft=draft("Solid has stores", "Solid: stores"), entity_ids=[SOLID])]
        ),
    )
    other = rec.record(draft("Solid is fast", "Solid renders with signals."))
    yield (
        "record_many",
        rec.record_many(
            [draft("Vite builds", "Vite builds the app."), draft("pnpm installs", "pnpm installs.")]
        ),
    )
    slug = first.meta.slug
    yield "get", rec.get(slug)
    if isinstance(api, MemoryService):
        # A get through the daemon counts as a read (issue 15: a get revives); in process the
        # caller counts it, as the CLI's `get` does.
        api.count_read(slug)
    yield "update_keywords", rec.update_keywords(slug, tags=["lint"], triggers=["ruff"])
    yield "update_title", rec.update_keywords(slug, title=first.meta.title + ", edited")
    yield "list_memories", rec.list_memories(scope=project, limit=10)
    yield "count_memories", rec.count_memories(scope=project, type=MemoryType.FACT)
    yield "scope_hash_of", rec.scope_hash_of(project)
    yield "search", rec.search("ruff", scope=project, k=3)
    # k=4: "Solid has signals" and "Solid has stores" tie, and a tie goes by slug, whose random
    # tail differs between the two homes; with both in, `normalise` orders ties by title.
    yield "recall", rec.recall("which framework does the app use", k=4, track=False)
    yield "entities", rec.entities(limit=10)
    yield "resolve_entity", rec.resolve_entity("Solid")
    yield "alias_entity", rec.alias_entity("Solid", "SolidJS")
    context = rec.entity_context("SolidJS", limit=5)
    # Memories written in the same second tie on created_at and fall back to their slugs,
    # whose random suffixes differ between the two homes: compare them by title.
    yield (
        "entity_context",
        context.model_copy(update={"memories": sorted(context.memories, key=lambda m: m.title)}),
    )
    yield "neighbors", rec.neighbors("Solid", depth=1)
    yield "relations", rec.relations(entity="Solid")
    yield "cypher", rec.cypher("MATCH (m:Memory) RETURN m.type, count(*) ORDER BY m.type")
    yield "supersedes_chain", rec.supersedes_chain(slug)
    yield "entity_supersedes", rec.entity_supersedes("Solid")
    yield "close_relations", rec.close_relations(facts.meta.slug, [uses])
    yield "merge_entities", rec.merge_entities(SOLID, "entity:project:app")
    yield "delete_entity", rec.delete_entity("Solid")
    yield "archive", rec.archive(other.meta.slug)
    # before the session below: the daemon's worker enriches it (adding mentions) in its time
    yield "trends", rec.trends(7, scope=project)
    yield "supersede_report", rec.supersede_report(scope=project)
    for name, call in (
        ("get missing", lambda: rec.get("no-such-slug")),
        ("long query", lambda: rec.recall("word " * 20_000, k=1)),
        ("write cypher", lambda: rec.cypher("MATCH (m:Memory) DELETE m")),
    ):
        try:
            call()
        except MemorydError as exc:
            yield name, (type(exc).__name__, exc.message)
        else:
            yield name, "no error"
    session = rec.record(
        draft(
            "Session: packaging",
            "We decided to use uv instead of pip because it resolves faster."
            " From now on always pin the versions in uv.lock.",
            MemoryType.SESSION,
        )
    )
    yield "analyze_session", rec.analyze_session(session.meta.slug, mode="heuristic")
    queued = rec.list_promotions(status=None, scope=project)
    yield "list_promotions", queued
    if queued:
        yield "get_promotion", rec.get_promotion(queued[0].id)
        yield "reject", rec.reject(queued[0].id, reason="not now")
    for name, call in (
        ("get unknown promotion", lambda: rec.get_promotion(10**6)),
        ("promote unknown", lambda: rec.promote(10**6)),
        ("reject unknown", lambda: rec.reject(10**6)),
    ):
        try:
            call()
        except MemorydError as exc:
            yield name, (type(exc).__name__, exc.message)
        else:
            yield name, "no error"
    yield "judge_supersedes", rec.judge_supersedes(slug, use_llm=False)
    yield "supersede_candidates", rec.supersede_candidates(scope=project)
    yield "automatic_supersedes", rec.automatic_supersedes(scope=project)
    yield "decay_sweep", rec.decay_sweep(dry_run=True)
    yield "duplicates", rec.duplicates(scope=project)
    yield "schedule", rec.schedule()
    secret = project.parent / f"{project.name}-client"
    secret.mkdir(exist_ok=True)
    (secret / ".memoryd-sensitive").touch()
    yield "grant", rec.grant(secret, "task", task="audit")
    yield "grants", rec.grants()
    yield "revoke", rec.revoke(secret, task="audit")
    vault = project.parent / f"{project.name}-vault"
    vault.mkdir(exist_ok=True)
    rec.record(MemoryDraft(type=MemoryType.FACT, title="Ledger", body="ledger", scope_path=vault))
    marked = rec.sensitive_mark(vault, passphrase="scenario words")  # keys differ: counts only
    yield "sensitive_mark", (marked.encrypted, marked.key_mode)
    yield "sensitive_status", [(s.encrypted, s.key_available) for s in rec.sensitive_status()]
    yield "sensitive_rotate_key", rec.sensitive_rotate_key(vault, passphrase="new words").resealed
    rec.grant(vault, "once")
    sealed = project.parent / "sealed.json"
    report = rec.sync_export(sealed, scope=vault, passphrase="sync words")
    yield "sync_export sealed", (report.encrypted, report.memories, report.omitted_sensitive)
    yield "sync_import sealed", rec.sync_import(sealed, dry_run=True, passphrase="sync words")
    yield "sensitive_unmark", rec.sensitive_unmark(vault, yes=True).decrypted
    yield "digest", rec.digest(scope=project, limit=5)
    twin = rec.record(draft("Solid renders fast", "Solid renders with fine-grained signals."))
    kept = rec.record(draft("Solid is quick", "Solid renders with fine-grained signals!"))
    yield "merge", rec.merge(kept.meta.slug, [twin.meta.slug])
    yield "restore", rec.restore(twin.meta.slug)
    for name, call in (
        ("decide unknown", lambda: rec.decide_supersede(slug, "no-such-slug", "accept")),
        ("restore unknown", lambda: rec.restore("no-such-slug")),
        ("report unknown entity", lambda: rec.supersede_report(entity="no-such-entity")),
        ("trends of no days", lambda: rec.trends(0)),
    ):
        try:
            call()
        except MemorydError as exc:
            yield name, (type(exc).__name__, exc.message)
        else:
            yield name, "no error"
    yield "profile_rewrite", rec.profile_rewrite()
    yield "profile_rewrite unchanged", rec.profile_rewrite(compiled=True)
    yield "profile_show", rec.profile_show()
    yield "profile_history", rec.profile_history(limit=5)
    yield "profile_diff", rec.profile_diff(1, 1)
    yield "profile_rollback", rec.profile_rollback(1)  # the same text: no new version
    yield "profile_report", rec.profile_report()  # last month: nothing in it
    yield "profile_reports", rec.profile_reports()
    yield from failures(
        ("profile unknown version", lambda: rec.profile_show(99)),
        ("profile diff unknown", lambda: rec.profile_diff(1, 99)),
        ("profile rollback unknown", lambda: rec.profile_rollback(99)),
        ("profile malformed month", lambda: rec.profile_report("2026-13")),
        ("profile future month", lambda: rec.profile_report("2999-01")),
    )
    exported = project.parent / "memories.json"
    report = rec.sync_export(exported, include_audit_chain=True)
    yield "sync_export", report.model_copy(update={"sha256": "", "bytes": 0})
    yield "sync_diff", rec.sync_diff(exported)
    yield "sync_import", rec.sync_import(exported, dry_run=True)
    yield "sync_conflicts", rec.sync_conflicts()
    try:
        rec.sync_resolve("no-such-memory", "local")
    except MemorydError as exc:
        yield "sync_resolve", (type(exc).__name__, exc.message)
    yield "drain_inbox", rec.drain_inbox()  # nothing captured: 0 either way
    yield "reindex", rec.reindex()
    yield "audit_records", rec.audit_records(scope=project, limit=50)
    yield "audit_verify", rec.audit_verify()
    yield "called", sorted(rec.called)


def normalise(steps: list[tuple[str, Any]], home: Path) -> list[tuple[str, Any]]:
    slugs: dict[str, str] = {}

    def plain(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    out = []
    for name, value in steps:
        text = json.dumps(plain(value), sort_keys=True, default=str).replace(str(home), "HOME")
        text = SLUG.sub(lambda m: slugs.setdefault(m.group(0), f"SLUG{len(slugs)}"), text)
        text = HASH.sub("HASH", TIMESTAMP.sub("TS", text))
        data = json.loads(text)
        if name == "audit_records":  # the actor and the daemon's own events aside
            # `seq` too: other scopes' events (a daemon appends batched read events on its
            # tick) interleave with this scope's by timing, so the numbers may shift.
            data = [
                {k: v for k, v in r.items() if k not in ("actor", "hash", "prev", "seq")}
                for r in data
            ]
        if name == "list_memories":  # newest first; memories of one instant in any order
            data.sort(key=lambda row: (row["created_at"], row["title"]))
        if name == "search":  # raw BM25: tantivy counts a replaced document until its
            # background merge has run, which commits one at a time do not wait for (a
            # `make test` run, 2026-12-05); the order of the hits is still compared
            data = [{k: v for k, v in hit.items() if k != "score"} for hit in data]
        if name == "recall":  # equal scores in slug order, and the slugs' tails are random
            data["hits"].sort(key=lambda hit: (-hit["score"], hit["title"]))
        if name in ("reindex", "decay_sweep", "digest"):
            data.pop("seconds")
        if name == "supersede_report":
            data.pop("generated_at")

        out.append((name, data))
    return out


def test_one_scenario_answers_the_same_in_process_and_through_the_daemon(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A commit per write on both sides: BM25 counts a replaced document until a merge, so a
    # record and its edit committed together or apart (the daemon's timer, its readers'
    # start) score the edited memory apart.
    monkeypatch.setenv("MEMORYD_SEARCH__COMMIT_DELAY_MS", "0")
    embedded_home = tmp_path / "embedded"
    with memoryd.open(embedded_home) as api:
        assert isinstance(api, MemoryService)
        embedded = normalise(list(scenario(api, project)), embedded_home)
    assert not (embedded_home / "memoryd.sock").exists()

    daemon_home = tmp_path / "daemon"
    # The daemon's worker scores the scenario's session on its own clock; parity is about
    # the answers, so it does not look during the scenario.
    with running(daemon_home, env={"MEMORYD_ENRICHMENT__INTERVAL_S": "3600"}) as daemon:
        with memoryd.open(daemon_home) as api:
            assert isinstance(api, RemoteService)
            remote = normalise(list(scenario(api, project)), daemon_home)
        assert daemon.stop() == 0

    assert dict(embedded)["called"] == members_called()
    answers = dict(embedded)
    assert answers["get missing"][0] == "NotFound"
    assert answers["long query"][0] == "InvalidInput"
    assert answers["write cypher"][0] == "PolicyDenied"
    assert answers["promote unknown"][0] == "NotFound"
    assert answers["report unknown entity"][0] == "NotFound"
    assert answers["trends of no days"][0] == "InvalidInput"
    assert answers["digest"]["totals"]["promotions"] == len(
        [p for p in answers["list_promotions"] if p["status"] == "pending"]
    )
    assert answers["profile unknown version"][0] == "NotFound"
    assert answers["profile malformed month"][0] == "InvalidInput"
    assert answers["profile future month"][0] == "NotFound"
    assert answers["profile_rewrite unchanged"]["written"] is False
    for (step, mine), (_, theirs) in zip(embedded, remote, strict=True):
        assert mine == theirs, f"{step} differs"


def members_called() -> list[str]:
    """The scenario calls every method but the lifecycle ones (the `with` does those)."""
    return sorted(set(members()) - LIFECYCLE)


def test_open_holds_the_data_dir_until_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_LOCK_TIMEOUT_S", "0.2")
    home = tmp_path / "home"
    api = memoryd.open(home)
    try:
        with pytest.raises(MemorydError, match="holds the graph"):
            memoryd.open(home).close()
    finally:
        api.close()
    memoryd.open(home).close()  # free again


def test_the_readmes_library_example_runs(
    tmp_path: Path,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("### Python library", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("MEMORYD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMORYD_LOCK_TIMEOUT_S", "1")
    monkeypatch.chdir(project)
    exec(compile(block, "README.md", "exec"), {})
    assert "Postgres for billing" in capsys.readouterr().out


def test_a_large_batch_goes_to_the_daemon_in_requests_that_land_whole(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`record_many` through the daemon splits into requests of `RECORD_BATCH`; a request
    holding a bad memory records none of its memories, and the error names the problem."""
    import memoryd.client.remote as remote

    monkeypatch.setattr(remote, "RECORD_BATCH", 2)
    home = tmp_path / "home"

    def draft(n: int, body: str | None = None) -> MemoryDraft:
        text = f"Fact number {n} about the build." if body is None else body
        return MemoryDraft(type=MemoryType.FACT, title=f"fact {n}", body=text, scope_path=project)

    with running(home), memoryd.open(home) as api:
        assert isinstance(api, RemoteService)
        recorded = api.record_many([draft(n) for n in range(5)])
        assert [m.meta.title for m in recorded] == [f"fact {n}" for n in range(5)]
        assert api.count_memories(scope=project) == 5
        # the second request holds a duplicate of fact 0's body: it lands not at all
        batch = [draft(5), draft(6), draft(7), draft(8, "Fact number 0 about the build.")]
        with pytest.raises(MemorydError) as caught:
            api.record_many(batch)
        assert "duplicate" in caught.value.message.lower() or "already" in caught.value.message
        titles = {m.title for m in api.list_memories(scope=project, limit=100)}
        assert titles == {f"fact {n}" for n in range(7)}
