"""The optional vector stage: its store, its calibration and fusion, its wiring.

The tests at the top need no model: the store is fed vectors given directly, and the fusion
is fed cosines directly. The tests that embed need the extra (`pip install memoryd[vectors]`)
and are skipped with that reason when it is not installed.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from memoryd.config import Settings
from memoryd.doctor import vectors_check
from memoryd.errors import StorageError
from memoryd.models import MemoryDraft, MemoryType
from memoryd.recall import CandidatePool
from memoryd.recall.config import INJECT_MIN_SCORE
from memoryd.recall.fusion import evidence_fusion
from memoryd.recall.vectors import (
    COSINE_FLOOR,
    COSINE_FULL,
    DENSE_WEIGHT,
    SyncReport,
    dense_evidence,
    dense_relevance,
    diff,
    expected,
    indexed_docs,
)
from memoryd.search.doc import SearchDoc
from memoryd.search.index import SearchIndex
from memoryd.search.vectors import (
    DB_FILE,
    MODEL_NAME,
    PASSAGE_WORDS,
    VECTORS_DIR,
    VectorIndex,
    fingerprint,
    passages,
    unavailable,
)
from memoryd.service import MemoryService
from memoryd.wiring import open_service

DIM = 4
NO_MODEL = unavailable()
needs_model = pytest.mark.skipif(
    NO_MODEL is not None, reason=f"the vector extra is not installed: {NO_MODEL}"
)


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def store(tmp_path: Path, model: str = "given") -> VectorIndex:
    return VectorIndex.open(tmp_path / VECTORS_DIR, model=model, dim=DIM)


# -- passages ---------------------------------------------------------------------------------
def test_passages_keep_lines_together_and_stay_within_the_word_limit() -> None:
    body = "\n".join(f"user: line {i} " + "word " * 30 for i in range(20))
    chunks = passages("A title", body)
    assert all(len(c.split()) <= PASSAGE_WORDS for c in chunks)
    assert chunks[0].startswith("A title user: line 0 ")
    # No line is cut when whole lines fit: each passage ends where a line ends.
    assert all(c.endswith("word") for c in chunks)
    assert " ".join(chunks).split() == ["A", "title", *body.split()]


def test_a_line_longer_than_a_passage_is_cut_into_passages() -> None:
    words = [f"w{i}" for i in range(450)]
    chunks = passages("", " ".join(words))
    assert [len(c.split()) for c in chunks] == [200, 200, 50]
    assert " ".join(chunks).split() == words


def test_empty_text_has_no_passage() -> None:
    assert passages("  ", "\n\n") == []


# -- the store ----------------------------------------------------------------------------------
def test_a_memory_scores_by_its_best_passage_within_the_scopes_asked(tmp_path: Path) -> None:
    vectors = store(tmp_path)
    vectors.put("near", "s1", "f1", np.stack([unit(0, 1, 0, 0), unit(1, 0.1, 0, 0)]))
    vectors.put("far", "s1", "f2", np.stack([unit(0, 0, 1, 0)]))
    vectors.put("elsewhere", "s2", "f3", np.stack([unit(1, 0, 0, 0)]))
    query = unit(1, 0, 0, 0)
    found = vectors.search(query, scope_hashes=["s1"], limit=10)
    assert [slug for slug, _ in found] == ["near", "far"]
    assert found[0][1] == pytest.approx(float(unit(1, 0.1, 0, 0) @ query), abs=1e-6)
    assert found[1][1] == pytest.approx(0.0, abs=1e-6)
    everywhere = vectors.search(query, scope_hashes=None, limit=1)
    assert everywhere == [("elsewhere", pytest.approx(1.0, abs=1e-6))]


def test_nearness_weighs_only_the_candidates_asked_by_their_best_passage(tmp_path: Path) -> None:
    vectors = store(tmp_path)
    vectors.put("near", "s1", "f1", np.stack([unit(0, 1, 0, 0), unit(1, 0.1, 0, 0)]))
    vectors.put("far", "s1", "f2", np.stack([unit(0, 0, 1, 0)]))
    vectors.put("other", "s1", "f3", np.stack([unit(1, 0, 0, 0)]))
    vectors.put("elsewhere", "s2", "f4", np.stack([unit(1, 0, 0, 0)]))
    query = unit(1, 0, 0, 0)
    near = vectors.nearness(query, ["far", "near", "elsewhere", "unknown"], scope_hashes=["s1"])
    assert set(near) == {"near", "far"}  # not asked, another scope, never embedded: absent
    assert near["near"] == pytest.approx(float(unit(1, 0.1, 0, 0) @ query), abs=1e-6)
    assert near["far"] == pytest.approx(0.0, abs=1e-6)
    # The same cosines the whole-scope search finds.
    assert dict(vectors.search(query, scope_hashes=["s1"], limit=10))["near"] == near["near"]
    assert vectors.nearness(query, [], scope_hashes=["s1"]) == {}


def test_the_store_keeps_vectors_across_opens_and_forgets_deleted_ones(tmp_path: Path) -> None:
    vectors = store(tmp_path)
    vectors.put_many(
        [
            ("a", "s", "fa", np.stack([unit(1, 0, 0, 0)])),
            ("b", "s", "fb", np.stack([unit(0, 1, 0, 0)])),
        ]
    )
    vectors.delete(["b"])
    vectors.close()
    again = store(tmp_path)
    assert again.fingerprints() == {"a": "fa"}
    kept = again.vectors("a")
    assert kept is not None
    np.testing.assert_array_equal(kept, np.stack([unit(1, 0, 0, 0)]))
    assert again.search(unit(0, 1, 0, 0), scope_hashes=["s"], limit=5)[0][0] == "a"


def test_a_store_made_by_another_model_is_emptied_on_open(tmp_path: Path) -> None:
    vectors = store(tmp_path, model="old-model")
    vectors.put("a", "s", "fa", np.stack([unit(1, 0, 0, 0)]))
    vectors.close()
    assert store(tmp_path, model="new-model").fingerprints() == {}


def test_a_reader_opens_only_a_store_that_exists_with_its_model(tmp_path: Path) -> None:
    directory = tmp_path / VECTORS_DIR
    with pytest.raises(StorageError, match="no vector store"):
        VectorIndex.open(directory, model="given", dim=DIM, read_only=True)
    writer = store(tmp_path)
    writer.put("a", "s", "fa", np.stack([unit(1, 0, 0, 0)]))
    reader = VectorIndex.open(directory, model="given", dim=DIM, read_only=True)
    assert reader.search(unit(1, 0, 0, 0), scope_hashes=None, limit=1)[0][0] == "a"
    # The reader sees the writer's later commits (its cached matrix is dropped).
    writer.put("b", "s", "fb", np.stack([unit(0, 1, 0, 0)]))
    assert reader.search(unit(0, 1, 0, 0), scope_hashes=None, limit=1)[0][0] == "b"
    with pytest.raises(StorageError, match="made by given"):
        VectorIndex.open(directory, model="other", dim=DIM, read_only=True)


def test_vectors_of_the_wrong_shape_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"expected \(n, 4\)"):
        store(tmp_path).put("a", "s", "fa", np.zeros((2, 3), dtype=np.float32))


def test_the_store_file_is_private(tmp_path: Path) -> None:
    store(tmp_path).put("a", "s", "fa", np.stack([unit(1, 0, 0, 0)]))
    for path in (tmp_path / VECTORS_DIR, tmp_path / VECTORS_DIR / DB_FILE):
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0


def test_diff_finds_new_changed_and_no_longer_indexed_memories(tmp_path: Path) -> None:
    index = SearchIndex.open(tmp_path / "search")
    when = datetime(2026, 1, 1, tzinfo=UTC)
    docs = [
        SearchDoc(
            slug=slug,
            scope_hash="s",
            type=MemoryType.FACT,
            decay_state="alive",
            title=f"title {slug}",
            body=f"body of {slug}",
            created_at=when,
        )
        for slug in ("same", "changed", "new")
    ]
    index.upsert(docs)
    vectors = store(tmp_path)
    same = fingerprint("title same", "body of same", "given")
    vectors.put("same", "s", same, np.stack([unit(1, 0, 0, 0)]))
    vectors.put("changed", "s", "an older text", np.stack([unit(1, 0, 0, 0)]))
    vectors.put("gone", "s", "whatever", np.stack([unit(1, 0, 0, 0)]))
    todo, gone, read = diff(index, vectors, None)
    assert (todo, gone) == (["changed", "new"], ["gone"])
    assert set(read) == {"same", "changed", "new"}
    health = vectors.health(expected(indexed_docs(index), "given"))
    assert (health.missing, health.stale, health.orphans) == (["new"], ["changed"], ["gone"])
    # Only the slugs asked about are looked at.
    assert diff(index, vectors, ["same", "gone"])[:2] == ([], ["gone"])
    index.close()


# -- calibration and fusion (cosines given directly) ---------------------------------------------
def test_dense_relevance_is_zero_below_the_floor_and_one_from_full() -> None:
    assert dense_relevance(-0.3) == dense_relevance(COSINE_FLOOR) == 0.0
    assert dense_relevance(COSINE_FULL) == dense_relevance(0.99) == 1.0
    middle = (COSINE_FLOOR + COSINE_FULL) / 2
    assert dense_relevance(middle) == pytest.approx(0.5)
    assert dense_evidence(1.0) == DENSE_WEIGHT


def test_fusion_adds_the_calibrated_cosine_not_a_rank() -> None:
    """The fused score keeps meaning "how well it fits": a memory only vaguely like the query
    stays below the inject threshold however it ranks, and text evidence still leads."""
    pool = CandidatePool()
    pool.at("text-hit").add("bm25", 0.6)
    pool.at("text-hit").add("vector", 0.5)
    pool.at("paraphrase").add("vector", 0.7)
    pool.at("vague").add("vector", COSINE_FLOOR + 0.05)
    fused = evidence_fusion(pool, ["bm25", "vector"])
    assert fused["text-hit"] == pytest.approx(0.6 + dense_evidence(0.5))
    assert fused["paraphrase"] == pytest.approx(dense_evidence(0.7))
    assert fused["vague"] < INJECT_MIN_SCORE
    assert fused["text-hit"] > fused["paraphrase"] > fused["vague"]
    assert pool["paraphrase"].factors["vector"] == pytest.approx(dense_evidence(0.7), abs=1e-4)
    # Alone, the best dense evidence never outvotes a memory holding the query's words.
    assert dense_evidence(1.0) < 0.5
    # The same cosines fused again give the same scores: no dependence on rank or pool size.
    alone = CandidatePool()
    alone.at("paraphrase").add("vector", 0.7)
    assert evidence_fusion(alone, ["vector"])["paraphrase"] == fused["paraphrase"]


# -- wiring, doctor, explain ---------------------------------------------------------------------
def vector_settings(settings: Settings, mode: str, model: str = "minilm") -> Settings:
    """`recall.vectors = mode` with `model` (the transformer unless told: the static table
    takes a minute to distil, so its tests give it a small table of their own)."""
    update = {"vectors": mode, "vector_model": model}
    return settings.model_copy(update={"recall": settings.recall.model_copy(update=update)})


def test_off_means_no_stage_and_doctor_says_so(settings: Settings, project: Path) -> None:
    with open_service(vector_settings(settings, "off")) as svc:
        assert svc.vectors is None
        assert svc.vector_stage is None
        svc.record(
            MemoryDraft(
                type=MemoryType.FACT, title="Cache", body="We use Redis.", scope_path=project
            )
        )
        result = svc.recall("Redis", scope=project)
        assert "vector" not in result.stages
        assert result.notes == ["no vector stage: recall.vectors is off"]
        check = vectors_check(svc, "off")
        assert check.ok
        assert "recall.vectors is off" in check.detail
    assert not (settings.home / VECTORS_DIR).exists()


def test_doctor_fails_when_vectors_are_asked_for_but_not_installed(
    settings: Settings, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the extra the stage is simply absent; `on` makes doctor say what to install.
    (Where the extra is installed, its absence is what `unavailable` reports.)"""
    import memoryd.search.vectors

    reason = "sentence_transformers not installed (pip install 'memoryd[vectors]')"
    monkeypatch.setattr(memoryd.search.vectors, "unavailable", lambda: reason)
    for mode in ("auto", "on"):
        with open_service(vector_settings(settings, mode)) as svc:
            assert svc.vectors is None
            assert svc.vectors_absent == reason
            check = vectors_check(svc, mode)
            assert check.ok is (mode == "auto")
            assert reason in check.detail
            assert ("pip install 'memoryd[vectors]'" in check.fix) is (mode == "on")
            svc.record(
                MemoryDraft(
                    type=MemoryType.FACT, title="Cache", body=f"Redis ({mode}).", scope_path=project
                )
            )
            assert svc.recall("Redis", scope=project).notes == [f"no vector stage: {reason}"]
    assert not (settings.home / VECTORS_DIR).exists()


@pytest.mark.skipif(NO_MODEL is None, reason="the vector extra is installed here")
def test_without_the_extra_auto_runs_without_the_stage(settings: Settings, project: Path) -> None:
    with open_service(vector_settings(settings, "auto")) as svc:
        assert svc.vectors is None
        assert svc.vectors_absent == NO_MODEL
        assert vectors_check(svc, "auto").ok
        assert not vectors_check(svc, "on").ok


# -- with the model --------------------------------------------------------------------------------
def record(svc: MemoryService, project: Path, title: str, body: str) -> str:
    draft = MemoryDraft(type=MemoryType.DECISION, title=title, body=body, scope_path=project)
    return svc.record(draft).meta.slug


def embed_round(svc: MemoryService) -> SyncReport:
    report = svc.embed_pending()
    assert report is not None, "the vector stage is on: a round reports"
    return report


@needs_model
def test_the_vector_stage_finds_a_paraphrase_text_search_misses(
    settings: Settings, project: Path
) -> None:
    with open_service(vector_settings(settings, "on")) as svc:
        assert svc.vectors is not None
        assert svc.vectors.embedder.name == MODEL_NAME
        auth = record(svc, project, "Login", "Users sign in with OAuth through GitHub.")
        record(svc, project, "Deploys", "Production deploys run from the main branch on Fridays.")
        record(svc, project, "Styles", "CSS modules, no Tailwind.")
        assert not vectors_check(svc, "on").ok  # not embedded yet: the worker's job
        report = embed_round(svc)
        assert (report.embedded, report.pending) == (3, [])
        assert vectors_check(svc, "on").ok
        result = svc.recall("how do people authenticate", scope=project, k=3, track=False)
        assert "vector" in result.stages
        assert result.hits[0].slug == auth
        assert "vector" in result.hits[0].factors
        assert result.notes == []


@needs_model
def test_writes_are_embedded_by_the_next_round_and_reindex_rebuilds(
    settings: Settings, project: Path
) -> None:
    with open_service(vector_settings(settings, "on")) as svc:
        assert svc.vectors is not None
        store = svc.vectors.store
        slug = record(svc, project, "Queue", "Background jobs run on Celery with Redis.")
        assert embed_round(svc).embedded == 1
        svc.update_keywords(slug, tags=["jobs"])  # the same text: nothing to embed again
        assert embed_round(svc).embedded == 0
        before = store.fingerprints()[slug]
        # The index rewritten as enrichment or a re-capture rewrites it: new text, new vectors.
        doc = svc.index.stored([slug])[slug]
        svc.index.upsert([doc.model_copy(update={"body": "Jobs moved to Dramatiq."})])
        assert embed_round(svc).embedded == 1
        assert store.fingerprints()[slug] != before
        svc.index.delete([slug])
        assert embed_round(svc).removed == 1
        assert slug not in store.fingerprints()
        other = record(svc, project, "Cache", "Redis caches the product pages.")
        # A stale row (as a crash would leave) is replaced by reindex.
        store.put(other, "x", "stale", np.full((1, 384), 0.05, dtype=np.float32))
        svc.reindex()
        health = store.health(expected(indexed_docs(svc.index), MODEL_NAME))
        assert health.memories == 2  # the vault still holds the one deleted from the index
        assert (health.missing, health.stale, health.orphans) == ([], [], [])
        # In a daemon, reindex leaves the embedding to its worker (the writer must not wait).
        svc.embeds_in_background = True
        svc.reindex()
        assert store.fingerprints() == {}
        report = embed_round(svc)
        assert (report.embedded, report.pending) == (2, [])
    # Reopened, the worker's first round compares the stores and finds nothing to do.
    with open_service(vector_settings(settings, "on")) as svc:
        report = embed_round(svc)
        assert (report.embedded, report.pending) == (0, [])


@needs_model
def test_the_daemon_embeds_in_the_background_and_its_readers_rank_with_vectors(
    home: Path, project: Path
) -> None:
    from tests.daemon_harness import running, uds_client

    env = {
        "MEMORYD_RECALL__VECTORS": "on",
        "MEMORYD_RECALL__VECTOR_MODEL": "minilm",
        "MEMORYD_ENRICHMENT__SETTLE_S": "0.2",
        "MEMORYD_DAEMON__RECALL_READERS": "1",
    }
    with running(home, env=env), uds_client(home, timeout=60) as http:
        login = {
            "type": "decision",
            "title": "Login",
            "body": "Users sign in with OAuth through GitHub.",
            "scope": str(project),
        }
        slug = http.post("/v1/memories", json=login).json()["meta"]["slug"]
        other = {
            "type": "fact",
            "title": "CI",
            "body": "CI runs on Fridays.",
            "scope": str(project),
        }
        assert http.post("/v1/memories", json=other).status_code == 201

        def check() -> dict[str, object]:
            return next(c for c in http.get("/v1/doctor").json() if c["name"] == "vectors")

        deadline = time.monotonic() + 120
        while not check()["ok"]:
            assert time.monotonic() < deadline, check()
            time.sleep(0.2)
        assert "2 memories" in str(check()["detail"])
        found = http.get(
            "/v1/recall", params={"q": "how do people authenticate", "scope": str(project)}
        ).json()
        assert "vector" in found["stages"]
        assert found["hits"][0]["slug"] == slug


def test_a_scope_with_no_vectors_is_not_worth_embedding_the_query(tmp_path: Path) -> None:
    """With the extra installed but nothing embedded yet, recall pays nothing for the stage:
    the model is not even loaded."""
    from memoryd.recall.vectors import DenseStage
    from memoryd.search.vectors import MiniLM

    vectors = store(tmp_path)
    vectors.put("a", "elsewhere", "fa", np.stack([unit(1, 0, 0, 0)]))
    model = MiniLM()
    stage = DenseStage(vectors, model)
    assert stage.search("anything", scope_hashes=["here"], limit=5) == []
    assert model._model is None
    assert vectors.holds(["elsewhere"])
    assert vectors.holds(None)
    assert not vectors.holds(["here"])


def test_recall_explain_and_doctor_say_the_stage_is_off(home: Path, project: Path) -> None:
    """The CLI, embedded (the conftest sets `recall.vectors = off`)."""
    from typer.testing import CliRunner

    from memoryd.cli.main import app

    runner = CliRunner()
    args = ["--home", str(home)]
    body = ["--title", "Cache", "--body", "We cache with Redis.", "--scope", str(project)]
    assert runner.invoke(app, ["record", "--type", "fact", *body, *args]).exit_code == 0
    explained = runner.invoke(app, ["recall", "Redis", "--explain", "--scope", str(project), *args])
    assert explained.exit_code == 0, explained.stderr
    assert "no vector stage: recall.vectors is off" in explained.stdout
    plain = runner.invoke(app, ["recall", "Redis", "--scope", str(project), *args])
    assert "no vector stage" not in plain.stdout
    doctor = runner.invoke(app, ["doctor", "--json", *args])
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    assert checks["vectors"]["ok"]
    assert "recall.vectors is off" in checks["vectors"]["detail"]


# -- the static table (distilled from MiniLM; the tests give it a small table of their own) ------
def word_pieces(text: str) -> list[int]:
    from tokenizers import Tokenizer

    from memoryd.search.vectors import model_dir

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


def synonym_table(groups: list[str]) -> np.ndarray:
    """A table where the word pieces of each text in `groups` share one direction, every other
    piece small noise: like a distilled table, where related words lie close and frequent
    pieces weigh little (SIF)."""
    from memoryd.search.vectors import STATIC_DIM

    rng = np.random.default_rng(7)
    table = (rng.standard_normal((30_522, STATIC_DIM)) * 0.01).astype(np.float32)
    for text in groups:
        table[word_pieces(text)] = 1.0 / np.sqrt(STATIC_DIM)
    return table


def static_settings(settings: Settings, table: np.ndarray | None) -> Settings:
    from memoryd.search.vectors import STATIC_TABLE, save_table

    if table is not None:
        save_table(settings.home / VECTORS_DIR / STATIC_TABLE, table)
    return vector_settings(settings, "on", "static")


def test_static_evidence_reorders_but_leaves_the_calibrated_score_to_the_text() -> None:
    """The static table's cosine alone barely tells answerable questions from unanswerable
    ones (DevMemBench AUC 0.74): it moves a memory up among the text hits, while the score
    `inject` thresholds stays what the text says."""
    from memoryd.recall.vectors import MINILM, STATIC

    pool = CandidatePool()
    pool.at("worded").add("bm25", 0.30)
    pool.at("meant").add("bm25", 0.28)
    pool.at("meant").add("vector", 0.70)
    pool.at("unworded").add("vector", 0.75)
    fused = evidence_fusion(pool, ["bm25", "vector"], STATIC)
    assert fused["meant"] > fused["worded"]
    assert fused["meant"] == pytest.approx(0.28 + dense_evidence(0.70, STATIC))
    assert pool["meant"].relevance == pytest.approx(0.28)
    assert pool["unworded"].relevance == 0.0
    assert pool["meant"].factors["vector"] == pytest.approx(dense_evidence(0.70, STATIC), abs=1e-4)
    # MiniLM's cosine is evidence of relevance too: it counts in the calibrated score.
    again = CandidatePool()
    again.at("meant").add("bm25", 0.28)
    again.at("meant").add("vector", 0.70)
    evidence_fusion(again, ["bm25", "vector"], MINILM)
    assert again["meant"].relevance == pytest.approx(0.28 + dense_evidence(0.70, MINILM))
    # A conversation turn is too short for an average of its words' rows to mean much: the
    # static evidence is fenced from it (MiniLM's is not).
    from memoryd.recall import TurnShape

    turns = CandidatePool()
    turns.at("turn").add("bm25", 0.28)
    turns.at("turn").add("vector", 0.70)
    turns["turn"].shape = TurnShape(words=12, asks=False)
    assert evidence_fusion(turns, ["bm25", "vector"], STATIC)["turn"] == pytest.approx(0.28)
    assert "vector" not in turns["turn"].factors
    assert evidence_fusion(turns, ["bm25", "vector"], MINILM)["turn"] > 0.28
    # Each embedder has its own floor: a static cosine of 0.4 is noise, a MiniLM one is not.
    assert dense_relevance(0.4, STATIC) == 0.0 < dense_relevance(0.4, MINILM)


@needs_model
def test_distilling_gives_each_word_piece_a_row_weighted_by_its_frequency() -> None:
    """model2vec's recipe on the first pieces of MiniLM's vocabulary: unused and special
    pieces stay zero, every other piece has a row, frequent (early) pieces weigh less, and
    the same weights give the same table."""
    from memoryd.search.vectors import distill_table, model_dir

    table = distill_table(model_dir(), dim=8, vocabulary=1_200)
    assert table.shape == (1_200, 8)
    assert table.dtype == np.float32
    norms = np.linalg.norm(table, axis=1)
    assert norms[0] == 0.0  # [PAD]
    assert norms[1] == 0.0  # [unused0]
    assert norms[101] == 0.0  # [CLS]
    used = np.flatnonzero(norms)
    assert len(used) > 150
    # SIF under Zipf's law: the first used pieces are taken as the most frequent.
    assert norms[used[:20]].mean() < norms[used[-20:]].mean()
    np.testing.assert_array_equal(table, distill_table(model_dir(), dim=8, vocabulary=1_200))


@needs_model
def test_a_static_query_is_the_mean_of_its_word_pieces(tmp_path: Path) -> None:
    from memoryd.search.vectors import STATIC_TABLE, StaticMiniLM, save_table

    table = synonym_table(["authenticate", "sign in"])
    save_table(tmp_path / STATIC_TABLE, table)
    embedder = StaticMiniLM(tmp_path, build=False)
    assert embedder.ready()
    vectors = embedder.encode(["authenticate", "sign in", "deploys on Fridays", ""])
    assert vectors.shape == (4, embedder.dim)
    np.testing.assert_allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, rtol=1e-5)
    assert float(vectors[0] @ vectors[1]) > 0.99
    assert abs(float(vectors[0] @ vectors[2])) < 0.3
    assert not vectors[3].any()  # nothing to average: no direction
    pieces = word_pieces("deploys on Fridays")
    expected_row = table[pieces].mean(axis=0)
    np.testing.assert_allclose(vectors[2], expected_row / np.linalg.norm(expected_row), atol=1e-6)


@needs_model
def test_a_reader_without_the_table_skips_the_stage_and_never_distils(tmp_path: Path) -> None:
    from memoryd.recall.vectors import DenseStage
    from memoryd.search.vectors import STATIC_DIM, STATIC_MODEL_NAME, StaticMiniLM

    vectors = VectorIndex.open(tmp_path / VECTORS_DIR, model=STATIC_MODEL_NAME, dim=STATIC_DIM)
    vectors.put("a", "here", "fa", np.full((1, STATIC_DIM), 1 / 16, dtype=np.float32))
    embedder = StaticMiniLM(tmp_path / "tables", build=False)
    stage = DenseStage(vectors, embedder)
    assert stage.search("anything", scope_hashes=["here"], limit=5) == []
    assert stage.rescore("anything", ["a"], scope_hashes=["here"]) == []
    assert not embedder.ready()
    with pytest.raises(StorageError, match="no static embedding table"):
        embedder.encode(["anything"])
    assert not (tmp_path / "tables").exists()


@needs_model
def test_the_static_stage_ranks_a_paraphrase_first_and_inline(
    settings: Settings, project: Path
) -> None:
    """The memory that says it in other words goes first among the text hits; its calibrated
    score is still the text's."""
    from memoryd.search.vectors import STATIC_MODEL_NAME, StaticMiniLM

    table = synonym_table(["authenticate", "sign in with OAuth"])
    assert Settings().recall.vector_model == "minilm"  # static is asked for
    with open_service(static_settings(settings, table)) as svc:
        assert svc.vectors is not None
        assert isinstance(svc.vectors.embedder, StaticMiniLM)
        assert svc.vectors.store.model == STATIC_MODEL_NAME
        assert svc.vector_stage is not None
        assert svc.vector_stage.cheap
        login = record(
            svc, project, "Login", "Users sign in with OAuth through GitHub; people log in once."
        )
        record(svc, project, "People", "People review the deploys on Fridays; people like the CI.")
        assert embed_round(svc).embedded == 2
        without = svc.recall("how do people authenticate", scope=project, k=2, track=False)
        assert "vector" in without.stages
        assert without.hits[0].slug == login
        assert "vector" in without.hits[0].factors
        text_only = svc.recall_config
        svc.recall_config = replace(text_only, stages=text_only.stages - {"vector"})
        plain = svc.recall("how do people authenticate", scope=project, k=2, track=False)
        assert plain.hits[0].slug != login  # the text stage alone ranks the other first
        assert {h.slug: h.score for h in plain.hits} == {h.slug: h.score for h in without.hits}


@needs_model
def test_the_daemons_readers_rank_with_the_static_table_the_writer_keeps(
    home: Path, project: Path
) -> None:
    """Readers open the table read-only (they never distil it) and rank with it."""
    from memoryd.search.vectors import STATIC_TABLE, save_table
    from tests.daemon_harness import running, uds_client

    save_table(home / VECTORS_DIR / STATIC_TABLE, synonym_table(["authenticate", "sign in"]))
    env = {
        "MEMORYD_RECALL__VECTORS": "on",
        "MEMORYD_RECALL__VECTOR_MODEL": "static",
        "MEMORYD_ENRICHMENT__SETTLE_S": "0.2",
        "MEMORYD_DAEMON__RECALL_READERS": "1",
    }
    with running(home, env=env), uds_client(home, timeout=60) as http:
        bodies = [
            ("Login", "Users sign in with OAuth through GitHub; people log in once."),
            ("People", "People review the deploys on Fridays; people like the CI."),
        ]
        slugs = [
            http.post(
                "/v1/memories",
                json={"type": "decision", "title": t, "body": b, "scope": str(project)},
            ).json()["meta"]["slug"]
            for t, b in bodies
        ]

        def check() -> dict[str, object]:
            return next(c for c in http.get("/v1/doctor").json() if c["name"] == "vectors")

        deadline = time.monotonic() + 60
        while not check()["ok"]:
            assert time.monotonic() < deadline, check()
            time.sleep(0.2)
        found = http.get(
            "/v1/recall", params={"q": "how do people authenticate", "scope": str(project)}
        ).json()
        assert "vector" in found["stages"]
        assert found["hits"][0]["slug"] == slugs[0]
        assert "vector" in found["hits"][0]["factors"]
