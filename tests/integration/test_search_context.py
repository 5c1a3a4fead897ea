"""The search index's recall aids: neighbouring session turns as context, word weights taken
within the searched scopes, and irregular word forms indexed in their base form."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import memoryd.search.engine as engine_module
import memoryd.search.reader as reader_module
import memoryd.search.tallies as tallies_module
import memoryd.search.writer as writer_module
from memoryd.models import DecayState, MemoryType
from memoryd.search.doc import SearchDoc
from memoryd.search.engine import _document
from memoryd.search.index import CONTEXT_FIELD, SCHEMA_VERSION, Placed, SearchIndex
from memoryd.search.sessions import CONTEXT_WINDOW
from memoryd.service import MemoryService
from memoryd.text import contains_cjk, segment
from tests.integration.test_recall_episodes import say

SCOPE, OTHER = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
START = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
CONTEXT = 0.15


def turn(slug: str, second: float, body: str, **fields: object) -> SearchDoc:
    values: dict[str, object] = {
        "slug": slug,
        "scope_hash": SCOPE,
        "type": MemoryType.SESSION,
        "decay_state": DecayState.ALIVE,
        "title": slug,
        "body": body,
        "created_at": START + timedelta(seconds=second),
    }
    values.update(fields)
    return SearchDoc.model_validate(values)


CHAT = [
    turn("t0", 0, "Morning! Slept badly again."),
    turn("t1", 1, "Did you finally adopt the puppy from the shelter?"),
    turn("t2", 2, "Yes! She is great for cuddles and companionship."),
    turn("t3", 3, "Lovely. What did you name her?"),
    turn("t4", 4, "Pixie, after my grandmother's cat."),
]


def open_index(path: Path) -> SearchIndex:
    return SearchIndex.open(path)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[SearchIndex]:
    with open_index(tmp_path / "search") as opened:
        yield opened


def found(index: SearchIndex, query: str, **kwargs: object) -> list[str]:
    return [h.slug for h in index.search(query, limit=20, **kwargs)]  # type: ignore[arg-type]


def matches(index: SearchIndex, queries: list[str]) -> list[set[str]]:
    """What each query finds, body or context (scores also count rewritten documents until
    tantivy merges them away, so they may differ where the contexts do not)."""
    return [set(found(index, q, context_boost=CONTEXT)) for q in queries]


def test_a_reply_is_found_by_the_turn_it_answers_only_with_context(index: SearchIndex) -> None:
    index.upsert(CHAT)
    # Plain search matches what a memory says itself.
    assert found(index, "puppy shelter") == ["t1"]
    # Recall also searches the neighbouring turns' text, well below the turn's own.
    with_context = found(index, "puppy shelter", context_boost=CONTEXT)
    assert with_context[0] == "t1"
    assert set(with_context) == {"t0", "t1", "t2"}
    hits = {h.slug: h for h in index.search("puppy", context_boost=CONTEXT)}
    assert hits["t2"].score < hits["t1"].score
    assert hits["t2"].matched_terms == []  # the body as written holds no query word


def test_context_is_the_nearest_turn_on_each_side_of_the_same_scope(index: SearchIndex) -> None:
    index.upsert(
        [
            *CHAT,
            turn("far", 4 + CONTEXT_WINDOW.total_seconds() + 1, "Anyone up for tennis?"),
            turn("elsewhere", 2.5, "A zebra in another project", scope_hash=OTHER),
            turn("decided", 2.6, "We chose the xylophone", type=MemoryType.DECISION),
        ]
    )
    # t4 is more than the window away from `far`: not neighbours.
    assert found(index, "tennis", context_boost=CONTEXT) == ["far"]
    # Other scopes and other types neither give nor take context.
    assert found(index, "zebra", context_boost=CONTEXT) == ["elsewhere"]
    assert found(index, "xylophone", context_boost=CONTEXT) == ["decided"]
    # Only the nearest turn each side: t0 is two turns from t2.
    assert "t0" not in found(index, "cuddles", context_boost=CONTEXT)
    assert set(found(index, "cuddles", context_boost=CONTEXT)) == {"t1", "t2", "t3"}


def test_writing_a_turn_updates_its_neighbours_context(index: SearchIndex) -> None:
    index.upsert([CHAT[0], CHAT[2]])
    assert set(found(index, "slept", context_boost=CONTEXT)) == {"t0", "t2"}
    # t1 comes between them: t2's context is now t1 (and t0's is t1 too).
    index.upsert([CHAT[1]])
    assert set(found(index, "slept", context_boost=CONTEXT)) == {"t0", "t1"}
    assert set(found(index, "cuddles", context_boost=CONTEXT)) == {"t1", "t2"}
    # An edit of t1's text reaches its neighbours' context.
    index.upsert([turn("t1", 1, "Did the kitten arrive?")])
    assert set(found(index, "kitten", context_boost=CONTEXT)) == {"t0", "t1", "t2"}
    assert found(index, "puppy", context_boost=CONTEXT) == []


def test_a_hidden_or_deleted_turn_leaves_its_neighbours_context(index: SearchIndex) -> None:
    index.upsert(CHAT)
    index.upsert([CHAT[1].model_copy(update={"decay_state": DecayState.SOFT_FORGOTTEN})])
    # The forgotten turn's words no longer find its neighbours; they are neighbours instead.
    assert found(index, "puppy shelter", context_boost=CONTEXT) == []
    assert set(found(index, "slept", context_boost=CONTEXT)) == {"t0", "t2"}
    index.delete(["t3"])
    assert set(found(index, "Pixie", context_boost=CONTEXT)) == {"t2", "t4"}
    assert set(found(index, "name", context_boost=CONTEXT)) == set()


def test_contexts_do_not_depend_on_the_order_turns_were_written(tmp_path: Path) -> None:
    chat = [
        turn(f"t{i}", i * 7 if i < 10 else 5000 + i, f"word{i} common word{i + 1} tail{i % 3}")
        for i in range(16)
    ]
    queries = [f"word{i}" for i in range(17)] + ["common tail1", "tail2"]
    with open_index(tmp_path / "at-once") as at_once:
        at_once.upsert(chat)
        expected = matches(at_once, queries)
    for seed in range(3):
        shuffled = list(chat)
        random.Random(seed).shuffle(shuffled)
        with open_index(tmp_path / f"one-by-one-{seed}") as one_by_one:
            for start in range(0, len(shuffled), 1 + seed):
                one_by_one.upsert(shuffled[start : start + 1 + seed])
            assert matches(one_by_one, queries) == expected


def test_turns_at_the_same_instant_are_ordered_by_slug(index: SearchIndex) -> None:
    index.upsert([turn("b", 0, "bravo"), turn("a", 0, "alpha"), turn("c", 0, "charlie")])
    assert set(found(index, "alpha", context_boost=CONTEXT)) == {"a", "b"}
    assert set(found(index, "bravo", context_boost=CONTEXT)) == {"a", "b", "c"}
    assert set(found(index, "charlie", context_boost=CONTEXT)) == {"b", "c"}


def test_scope_idf_weighs_words_as_rare_as_they_are_in_the_scope(index: SearchIndex) -> None:
    # "deploy" is rare in the whole index but in most of this scope's memories; "rollback"
    # is rare here but everywhere in the other scope.
    notes = [
        SearchDoc(
            slug=f"n{i}",
            scope_hash=SCOPE,
            type=MemoryType.FACT,
            decay_state=DecayState.ALIVE,
            title=f"note {i}",
            body=f"deploy step {i}",
            created_at=START,
        )
        for i in range(8)
    ]
    rollback = notes[0].model_copy(update={"slug": "rb", "body": "the rollback plan"})
    elsewhere = [
        n.model_copy(update={"slug": f"o{i}", "scope_hash": OTHER, "body": "rollback again"})
        for i, n in enumerate(notes * 4)
    ]
    index.upsert([*notes, rollback, *elsewhere])
    plain = index.search("deploy rollback", scope_hashes=[SCOPE], limit=3)
    assert plain[0].slug != "rb"
    scoped = index.search("deploy rollback", scope_hashes=[SCOPE], limit=3, scope_idf=True)
    assert scoped[0].slug == "rb"
    # Without scopes (or with all of them) the weights are BM25's own.
    everywhere = index.search("deploy rollback", limit=3)
    assert [h.slug for h in index.search("deploy rollback", limit=3, scope_idf=True)] == [
        h.slug for h in everywhere
    ]


def test_irregular_forms_meet_their_base_form(index: SearchIndex) -> None:
    index.upsert(
        [
            turn("bought", 0, "I bought a kayak and went to the lake with the children."),
            turn("other", 100_000, "Nothing to see here."),
        ]
    )
    assert found(index, "buy") == ["bought"]
    assert found(index, "what did they go to") == ["bought"]
    assert found(index, "child") == ["bought"]
    hit = index.search("kayak")[0]
    assert "bought" in hit.snippet  # shown as written


def test_the_schema_version_counts_the_context_segmented_and_slug_key_fields() -> None:
    assert SCHEMA_VERSION == 4


def test_reindex_rebuilds_the_same_contexts(svc: MemoryService, project: Path) -> None:
    lines = [
        "We adopted a puppy from the shelter.",
        "Great for cuddles and companionship!",
        "What did you name her?",
        "Pixie.",
        "Unrelated: the deploy went fine.",
    ]
    for i, line in enumerate(lines):
        say(svc, project, "Ann" if i % 2 else "Bob", line, i)
    queries = ["puppy shelter", "name", "Pixie", "deploy"]

    def recalled() -> list[list[str]]:
        return [[h.slug for h in svc.recall(q, scope=project, track=False).hits] for q in queries]

    before = recalled()
    assert len(before[0]) >= 2  # the reply is found through its context
    svc.reindex()
    assert recalled() == before


def test_same_instant_turns_written_apart_get_the_same_contexts(tmp_path: Path) -> None:
    chat = [turn(name, 0, name) for name in ("delta", "alpha", "charlie", "bravo")]
    queries = ["alpha", "bravo", "charlie", "delta"]
    with open_index(tmp_path / "at-once") as at_once:
        at_once.upsert(chat)
        expected = matches(at_once, queries)
    assert expected[0] == {"alpha", "bravo"}
    with open_index(tmp_path / "apart") as apart:
        for doc in chat:
            apart.upsert([doc])
        assert matches(apart, queries) == expected


def test_a_turn_moved_in_time_leaves_its_old_neighbours(index: SearchIndex) -> None:
    index.upsert(CHAT)
    index.upsert([CHAT[2].model_copy(update={"created_at": START + timedelta(seconds=5)})])
    # t1 and t3 now neighbour each other; t2 follows t4.
    assert set(found(index, "cuddles", context_boost=CONTEXT)) == {"t2", "t4"}
    assert set(found(index, "shelter", context_boost=CONTEXT)) == {"t0", "t1", "t3"}


def test_a_decay_write_leaves_the_contexts_a_fresh_index_of_its_result_holds(
    tmp_path: Path,
) -> None:
    """`set_decay_states` skips the turns whose neighbours are all being hidden or deleted
    (a sweep over a whole vault): what it leaves is what indexing the result at once gives.
    Searches find what they find there; recall, hidden turns included, ranks the same.

    A turn that fades keeps the indexed context it had (its state goes into the overlay,
    its document stays), so a search that includes hidden turns may still reach one by a
    neighbour's words; recall scores contexts from its statistics, which follow the
    states, so such a candidate scores as it would in a fresh index."""
    rng = random.Random(7)
    second, chat = 0.0, []
    for i in range(60):
        second += rng.choice([0, 60, 600, 3000])  # ties, neighbours, and gaps past the window
        chat.append(turn(f"t{i:02d}", second, f"word{i} common tail{i % 4}"))
    queries = [f"word{i}" for i in range(60)] + ["common tail1", "tail3"]
    for seed in range(4):
        pick = random.Random(seed)
        states: dict[str, DecayState] = {}
        gone: list[str] = []
        for doc in chat:
            roll = pick.random()
            if roll < 0.3:
                gone.append(doc.slug)
            elif roll < 0.5:
                states[doc.slug] = DecayState.SOFT_FORGOTTEN
            elif roll < 0.65:
                states[doc.slug] = DecayState.DIM
        after = [
            doc.model_copy(update={"decay_state": states.get(doc.slug, doc.decay_state)})
            for doc in chat
            if doc.slug not in gone
        ]
        with open_index(tmp_path / f"at-once-{seed}") as at_once:
            at_once.upsert(after)
            expected = matches(at_once, queries)
            hidden_too = [recalled_with_hidden(at_once, q) for q in queries]
        # A sweep tells where its forgotten turns stood, so they are deleted unread.
        places = {
            doc.slug: Placed(doc.scope_hash, doc.decay_state, doc.created_at)
            for doc in chat
            if doc.slug in gone
        }
        for name, placed in (("swept", None), ("swept-unread", places)):
            with open_index(tmp_path / f"{name}-{seed}") as swept:
                swept.upsert(chat)
            # Reopened: its statistics are not tallied, so the forgotten turns go unread.
            with open_index(tmp_path / f"{name}-{seed}") as swept:
                assert not swept._stats.wants(SCOPE)
                swept.set_decay_states(states, gone, placed)
                assert matches(swept, queries) == expected
                assert [recalled_with_hidden(swept, q) for q in queries] == hidden_too
                # A hidden turn is still found by its own words when asked for.
                for doc in chat:
                    if states.get(doc.slug) is DecayState.SOFT_FORGOTTEN:
                        number = doc.slug[1:]
                        assert doc.slug not in found(swept, f"word{int(number)}")
                        assert doc.slug in found(
                            swept, f"word{int(number)}", include_forgotten=True
                        )


def recalled_with_hidden(index: SearchIndex, query: str) -> list[tuple[str, float]]:
    """What recall's text stage ranks for `query`, hidden turns included, with their scores
    (rounded: tantivy's own scores play no part)."""
    ranking = index.local_bm25(query, include_forgotten=True, limit=20, context_boost=CONTEXT)
    return [(hit.slug, round(hit.score, 9)) for hit in ranking.hits]


def test_a_document_read_back_is_the_document_written(index: SearchIndex) -> None:
    """Documents are read back without pydantic's field walk (`models.typed`): they still equal,
    dump and copy as the validated ones."""
    written = turn("t9", 9, "Pixie 的 toys", tags=["pets"], triggers=["puppy"])
    index.upsert([written])
    read = index.stored(["t9"])["t9"]
    assert read == written
    assert read.model_dump() == written.model_dump()
    assert read.model_copy(update={"decay_state": DecayState.DIM}).decay_state is DecayState.DIM
    assert read.model_fields_set == written.model_fields_set | {"withheld"}


def test_a_context_cut_part_by_part_indexes_as_the_joined_context() -> None:
    """A bulk write segments each body once (`_document` with the parts and a remembering
    cut): the document is the one the joined context gives, Chinese at every edge."""
    parts = [
        "数据库迁移到 Postgres，用Redis缓存",
        "Kuzu图数据库",
        "plain English turn",
        "末尾是中文",
        " 前后有空格 ",
        "混合text混合",
    ]
    doc = turn("t9", 9, "缓存的数据库 choice", tags=["数据库", "cache"], triggers=["迁移"])
    for start in range(len(parts)):
        for size in (1, 2, 3):
            chosen = parts[start : start + size]
            cut = functools.lru_cache(maxsize=None)(segment)
            remembered = _document(doc, chosen, cut).to_dict()
            assert remembered == _document(doc, "\n".join(chosen)).to_dict()
            assert remembered[CONTEXT_FIELD]
    assert _document(doc, [], segment).to_dict() == _document(doc, "").to_dict()


def test_a_decay_write_cuts_no_stored_chinese_text_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documents a decay write re-adds (moved ones, neighbours whose context changes) keep
    the segmentation stored with them (`SEGMENTED_FIELD`): jieba cuts none of their text again,
    and the index ends as indexing the result at once leaves it."""
    chat = [
        turn("z0", 0, "我们决定改用数据库 for the cache", title="缓存方案", tags=["数据库"]),
        turn("z1", 60, "迁移脚本已经写好了", triggers=["迁移"]),
        turn("z2", 120, "回滚计划还没有确定"),
        turn("z3", 180, "plain English turn about the rollout"),
        turn("z4", 240, "上线时间定在周五"),
    ]
    states = {"z1": DecayState.DIM, "z3": DecayState.SOFT_FORGOTTEN}
    gone = ["z2"]
    after = [
        doc.model_copy(update={"decay_state": states.get(doc.slug, doc.decay_state)})
        for doc in chat
        if doc.slug not in gone
    ]
    queries = ["数据库", "迁移", "回滚", "上线", "周五", "缓存", "rollout", "脚本"]
    with open_index(tmp_path / "at-once") as at_once:
        at_once.upsert(after)
        expected = matches(at_once, queries)
        hidden_too = [set(found(at_once, q, include_forgotten=True)) for q in queries]
    with open_index(tmp_path / "swept") as swept:
        swept.upsert(chat)
    cut: list[str] = []
    real = segment

    def counted(text: str) -> str:
        cut.append(text)
        return real(text)

    for module in (engine_module, reader_module, tallies_module, writer_module):
        monkeypatch.setattr(module, "segment", counted)
    with open_index(tmp_path / "swept") as swept:  # reopened: nothing cached in the process
        swept.set_decay_states(states, gone)
        written = {
            text
            for doc in chat
            for text in (doc.title, doc.body, *doc.tags, *doc.triggers)
            if contains_cjk(text)
        }
        assert written.isdisjoint(cut)
        assert matches(swept, queries) == expected
        assert [set(found(swept, q, include_forgotten=True)) for q in queries] == hidden_too
