"""The offline extraction stage, on texts the way coding-agent sessions write them."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memoryd.extraction.linking import KnownEntity, normalise_name
from memoryd.extraction.patterns import split_sentences
from memoryd.extraction.pipeline import Extractor, load_lexicon
from memoryd.extraction.wordlists import load_common_words
from memoryd.models import EntityType, Extraction, Predicate

POSTGRES = KnownEntity(
    id="entity:tool:PostgreSQL", name="PostgreSQL", type=EntityType.TOOL, aliases=["Postgres"]
)
MEMORYD = KnownEntity(
    id="entity:project:memoryd",
    name="memoryd",
    type=EntityType.PROJECT,
    aliases=["记忆引擎"],
)


def ids(result: Extraction) -> set[str]:
    return {e.id for e in result.entities}


def triples(result: Extraction) -> set[tuple[str, str, str]]:
    return {(r.subject, r.predicate.value, r.object) for r in result.relations}


def relation(result: Extraction, subject: str, predicate: Predicate, obj: str) -> float:
    for rel in result.relations:
        if (rel.subject, rel.predicate, rel.object) == (subject, predicate, obj):
            return rel.confidence
    raise AssertionError(f"no {subject} {predicate.value} {obj} in {sorted(triples(result))}")


# --- module boundaries and shipped data --------------------------------------------------------


def test_importing_the_pipeline_does_not_import_spacy() -> None:
    code = (
        "import sys, memoryd.extraction.pipeline, memoryd.extraction.relations;"
        "print('spacy' in sys.modules, 'jieba' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_shipped_lexicon_is_well_formed() -> None:
    entries = load_lexicon()
    assert len(entries) > 3000
    sources = {e.source for e in entries}
    assert {"curated", "pypi", "npm"} <= sources
    by_name = {e.name: e for e in entries}
    assert by_name["PostgreSQL"].type is EntityType.TOOL
    assert "Postgres" in by_name["PostgreSQL"].aliases
    assert "k8s" in by_name["Kubernetes"].aliases
    assert by_name["FastAPI"].type is EntityType.LIBRARY
    assert "Solid" in by_name["Solid"].case_sensitive
    owners: dict[str, set[str]] = {}
    for entry in entries:
        for surface in (entry.name, *entry.aliases):
            owners.setdefault(surface.casefold(), set()).add(entry.name)
    assert [s for s, names in owners.items() if len(names) > 1] == []
    # everyday words are absent, or present only as a capitalised, exact-case name ("Click")
    for word in ("the", "use", "time", "test", "six", "click", "requests", "debug", "solid"):
        for entry in entries:
            for surface in (entry.name, *entry.aliases):
                if surface.casefold() == word:
                    assert surface != word
                    assert surface in entry.case_sensitive
    registry = [e for e in entries if e.source != "curated"]
    assert all(len(e.name) >= 3 for e in registry)
    assert not any(e.name.isdigit() for e in entries)


def test_common_words_are_shipped() -> None:
    words = load_common_words()
    assert {"the", "review", "code", "time"} <= words
    assert len(words) > 4000


def test_custom_lexicon_file_can_be_loaded(tmp_path: Path) -> None:
    path = tmp_path / "lexicon.jsonl"
    path.write_text(
        '{"name": "Zeta", "type": "tool", "aliases": ["zt"], "source": "test"}\n\n',
        encoding="utf-8",
    )
    [entry] = load_lexicon(path)
    assert (entry.name, entry.type, entry.aliases) == ("Zeta", EntityType.TOOL, ("zt",))


# --- the examples of the brief -----------------------------------------------------------------


def test_switching_frameworks_gives_preference_and_supersede(extractor: Extractor) -> None:
    result = extractor.extract("We switched from React to Solid because the bundle was too big.")
    assert ids(result) == {"entity:library:React", "entity:library:Solid"}
    react, solid = "entity:library:React", "entity:library:Solid"
    assert relation(result, "memory", Predicate.PREFERS, solid) >= 0.8
    assert relation(result, solid, Predicate.SUPERSEDES, react) >= 0.7
    assert relation(result, react, Predicate.SUPERSEDED_BY, solid) >= 0.7
    assert "causal language: because" in result.notes
    assert result.stages == ["lexicon", "patterns", "linking", "relations"]


def test_chinese_decision_to_switch_databases(extractor: Extractor) -> None:
    result = extractor.extract("我们决定从 MySQL 切到 PostgreSQL,因为需要 JSONB。")
    mysql, pg = "entity:tool:MySQL", "entity:tool:PostgreSQL"
    assert ids(result) == {mysql, pg}
    assert relation(result, pg, Predicate.SUPERSEDES, mysql) > 0.7  # raised by 决定 / 因为
    assert relation(result, mysql, Predicate.SUPERSEDED_BY, pg) > 0.7
    assert relation(result, "memory", Predicate.PREFERS, pg) > 0.8
    assert "language: zh" in result.notes
    assert "decision language: 决定" in result.notes
    assert "causal language: 因为" in result.notes


def test_runs_on_chains_through_the_stack(extractor: Extractor) -> None:
    result = extractor.extract("The API runs on Kubernetes on AWS.")
    k8s, aws = "entity:tool:Kubernetes", "entity:tool:AWS"
    assert relation(result, "memory", Predicate.RUNS_ON, k8s) > 0.7
    assert relation(result, k8s, Predicate.RUNS_ON, aws) > 0.6
    assert ("memory", "runs_on", aws) not in triples(result)


def test_mention_is_a_person_and_a_path_is_a_note(extractor: Extractor) -> None:
    result = extractor.extract("@alice reviewed src/memoryd/graph/store.py")
    [alice] = result.entities
    assert alice.id == "entity:person:alice"
    assert alice.aliases == ["@alice"]
    assert alice.spans == [(0, 6)]
    assert "file: src/memoryd/graph/store.py" in result.notes


def test_known_entity_is_found_by_its_alias(extractor: Extractor) -> None:
    result = extractor.extract("Sessions now live in Postgres.", known=[POSTGRES])
    [pg] = result.entities
    assert pg.id == POSTGRES.id
    assert pg.aliases == ["Postgres"]
    assert pg.stage == "known"
    assert pg.confidence >= 0.9
    assert result.stages[0] == "known"


def test_known_entity_outside_the_lexicon_is_found(extractor: Extractor) -> None:
    known = [
        KnownEntity(id="entity:project:Atlas Console", name="Atlas Console", type="project"),
        MEMORYD,
    ]
    result = extractor.extract("The atlas console talks to memoryd over MCP.", known=known)
    assert {"entity:project:Atlas Console", "entity:project:memoryd"} <= ids(result)


def test_known_chinese_alias_is_found_in_chinese_text(extractor: Extractor) -> None:
    result = extractor.extract("记忆引擎的召回太慢了,需要加索引。", known=[MEMORYD])
    assert ids(result) == {"entity:project:memoryd"}
    assert result.entities[0].aliases == ["记忆引擎"]


def test_known_type_wins_over_lexicon_type(extractor: Extractor) -> None:
    known = [KnownEntity(id="entity:library:Kuzu", name="Kuzu", type="library")]
    result = extractor.extract("Kuzu holds the graph.", known=known)
    assert ids(result) == {"entity:library:Kuzu"}


def test_known_set_rulers_are_cached(extractor: Extractor) -> None:
    first = [POSTGRES, MEMORYD]
    extractor.extract("Postgres and memoryd.", known=first)
    cached = len(extractor._known_index)
    extractor.extract("Postgres and memoryd again.", known=list(reversed(first)))
    assert len(extractor._known_index) == cached


def test_growing_known_set_extends_the_cached_ruler() -> None:
    x = Extractor()
    text = "Postgres stores what memoryd writes."
    assert ids(x.extract(text, known=[POSTGRES])) == {POSTGRES.id}
    assert ids(x.extract(text, known=[POSTGRES, MEMORYD])) == {POSTGRES.id, MEMORYD.id}
    assert len(x._known_index) == 1  # grown in place, not built twice
    # the smaller set again is a fresh entry that does not know memoryd
    assert ids(x.extract(text, known=[POSTGRES])) == {POSTGRES.id}


def test_extract_many_says_what_extract_says_of_each() -> None:
    """The write path extracts a batch against one set of known entities at once: the same
    entities, relations, stages and notes as one `extract` per text, in order, whatever
    the language, with and without known entities and for an empty text; lazily."""
    texts = [
        ("Switch to Postgres", "We switched from MySQL to Postgres because of replication."),
        ("", "记忆引擎 部署在 Kubernetes 上,我们决定采用 PostgreSQL。"),
        ("Empty", "   "),
        ("", "memoryd runs on Kuzu. See RFC 9110 and https://github.com/kuzudb/kuzu."),
    ]
    for known in ([], [POSTGRES, MEMORYD]):
        one = Extractor()
        expected = [one.extract(body, title=title, known=known) for title, body in texts]
        assert list(Extractor().extract_many(texts, known=known)) == expected
    assert list(Extractor().extract_many([], known=[POSTGRES])) == []
    # One at a time: a batch's extractions are never all held at once.
    pending = iter(texts)
    lazily = Extractor().extract_many(pending, known=[POSTGRES])
    assert next(lazily) == expected[0]
    assert next(pending) == texts[1]


def test_known_entity_named_by_an_everyday_word_is_careful(extractor: Extractor) -> None:
    known = [KnownEntity(id="entity:concept:memory", name="memory", type="concept")]
    [hit] = extractor.extract("The memory is cold after a deploy.", known=known).entities
    assert hit.id == "entity:concept:memory"
    assert hit.confidence < 0.7
    assert extractor.extract("MEMORY PRESSURE", known=known).entities == []


def test_sentences_end_where_the_end_pattern_matches() -> None:
    """`split_sentences` tries its end pattern only where a match can begin; it cuts where
    the pattern tried at every position would, abbreviations, closing quotes and blank lines
    included (random texts over the characters the pattern reads)."""
    import itertools
    import random
    import re

    from memoryd.extraction import patterns

    def reference(text: str) -> list[tuple[int, int]]:
        spans = []
        cuts = sorted(
            {0, len(text)}
            | {m.end() for m in patterns._SENTENCE_END_RE.finditer(text)}
            | {m.start() + 1 for m in patterns._LINE_START_RE.finditer(text)}
        )
        for start, end in itertools.pairwise(cuts):
            lead = patterns._LEADING_RE.match(text, start, end)
            real_start = lead.end() if lead else start
            while end > real_start and text[end - 1].isspace():
                end -= 1
            if end > real_start:
                spans.append((real_start, end))
        return spans

    pieces = [*re.split("( )", "e.g i.e etc vs cf Mr Dr a b"), ".", "!", "?", "\n", "。", "」", '"']
    rng = random.Random(28)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 24)))
        assert split_sentences(text) == reference(text), text


def test_a_scan_skipped_for_want_of_its_literal_would_have_found_nothing() -> None:
    """The shape scans skip a text without the literal every match holds ("@" for an
    e-mail, "://" for a URL, RFC or PEP for a citation, quotes and an import word for a JS
    import): on the labelled texts and on texts that hold the literals, they find what the
    scan over every text finds."""
    import yaml

    from memoryd.extraction import code_context, patterns

    scans = [
        (patterns.URL_RE, ("://",)),
        (patterns.EMAIL_RE, ("@",)),
        (patterns.SCOPED_PACKAGE_RE, ("@",)),
        (patterns.MENTION_RE, ("@",)),
        (patterns.CITATION_RE, ("RFC", "PEP")),
        (code_context.JS_IMPORT_RE, ("from", "require(", "import")),
    ]
    data = Path(__file__).resolve().parents[1] / "data" / "entities"
    texts = [
        item["text"]
        for path in sorted(data.glob("*.yaml"))
        for item in yaml.safe_load(path.read_text(encoding="utf-8")) or []
        if isinstance(item, dict) and "text" in item
    ]
    texts += [
        "Mail ops@example.com or ping @alice; `npm i @babel/core` per RFC 9110 and PEP-8.",
        "See https://github.com/kuzudb/kuzu, then: import x from 'zod'; require( \"left-pad\")",
    ]
    found = 0
    for regex, needed in scans:
        for text in texts:
            everywhere = [m.span() for m in regex.finditer(text)]
            assert [m.span() for m in patterns.finditer_holding(regex, text, *needed)] == (
                everywhere
            )
            found += len(everywhere)
    assert found > 20  # the texts hold matches of every kind


def test_sentences_keep_paths_and_abbreviations_whole() -> None:
    text = "Edit store.py, e.g. the lock. Done!\n- next item\n\n完成了。好"
    assert [text[a:b] for a, b in split_sentences(text)] == [
        "Edit store.py, e.g. the lock.",
        "Done!",
        "next item",
        "完成了。",
        "好",
    ]


def test_bracketed_chinese_names_are_concepts(extractor: Extractor) -> None:
    result = extractor.extract("【注意】「记忆引擎」的设计见【支付系统】。")
    assert ids(result) == {"entity:concept:记忆引擎", "entity:project:支付系统"}


# --- no false entities -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Use the time to test it. The test took time and we use it again.",
        "A solid plan: move the cursor, then react to the express request in black and white.",
        "Next Steps and Code Review are headings we write all the time.",
        "UV light; go ahead and merge it.",
    ],
)
def test_everyday_words_are_not_entities(extractor: Extractor, text: str) -> None:
    result = extractor.extract(text)
    assert result.entities == [], [e.name for e in result.entities]


def test_ambiguous_name_at_sentence_start_is_less_certain(extractor: Extractor) -> None:
    start = extractor.extract("Solid is fast enough.").entities[0]
    middle = extractor.extract("We like Solid a lot.").entities[0]
    assert start.id == middle.id == "entity:library:Solid"
    assert start.confidence < middle.confidence


def test_decorators_emails_and_scopes_are_not_people(extractor: Extractor) -> None:
    text = (
        "@property\ndef name(self): ...\n@app.get('/x')\nMail bob@example.com about it.\n"
        "Then run npx @biomejs/biome check."
    )
    result = extractor.extract(text)
    assert not [e for e in result.entities if e.type is EntityType.PERSON]
    assert "entity:library:@biomejs/biome" in ids(result)


def test_paths_and_urls_shield_their_inside(extractor: Extractor) -> None:
    result = extractor.extract(
        "Edit frontend/react/app.tsx and read https://docs.python.org/3/library/asyncio.html."
    )
    assert "entity:library:React" not in ids(result)
    assert "entity:tool:Python" not in ids(result)
    doc = "entity:concept:docs.python.org/3/library/asyncio.html"
    assert relation(result, "memory", Predicate.CITES, doc) > 0.8
    assert "file: frontend/react/app.tsx" in result.notes


# --- pattern stage -----------------------------------------------------------------------------


def test_code_context_finds_names_the_lexicon_leaves_out(extractor: Extractor) -> None:
    text = (
        "pip install requests 'httpx>=0.28' -U\n"
        "import numpy as np\n"
        "from os import path\n"
        "const z = require('zod');\n"
        "brew install ripgrep"
    )
    result = extractor.extract(text)
    found = ids(result)
    assert {
        "entity:library:requests",
        "entity:library:httpx",
        "entity:library:NumPy",
        "entity:library:Zod",
        "entity:tool:ripgrep",
    } <= found
    assert not any(":os" in i or ":path" in i for i in found)


def test_repository_url_becomes_a_cited_project(extractor: Extractor) -> None:
    result = extractor.extract("See https://github.com/kuzudb/kuzu/issues/5 for the lock bug.")
    assert relation(result, "memory", Predicate.CITES, "entity:project:kuzudb/kuzu") > 0.8


def test_rfc_and_pep_are_cited_concepts(extractor: Extractor) -> None:
    result = extractor.extract("Status codes follow RFC 9110 and names follow PEP-8.")
    assert relation(result, "memory", Predicate.CITES, "entity:concept:RFC 9110") > 0.7
    assert relation(result, "memory", Predicate.CITES, "entity:concept:PEP 8") > 0.7


def test_module_path_credits_its_known_root(extractor: Extractor) -> None:
    result = extractor.extract("The lock lives in memoryd.graph.store now.", known=[MEMORYD])
    assert ids(result) == {"entity:project:memoryd"}
    assert "module: memoryd.graph.store" in result.notes


def test_camelcase_and_capitalised_names_are_low_confidence(extractor: Extractor) -> None:
    result = extractor.extract("Alice Chen moved GraphStore into Acme Labs.")
    by_id = {e.id: e for e in result.entities}
    assert by_id["entity:concept:GraphStore"].confidence < 0.5
    assert by_id["entity:person:Alice Chen"].confidence <= 0.5
    assert by_id["entity:organization:Acme Labs"].confidence <= 0.5


def test_cloud_region_is_a_place(extractor: Extractor) -> None:
    result = extractor.extract("The bucket is in us-east-1.")
    assert ids(result) == {"entity:place:us-east-1"}


# --- relation rules ----------------------------------------------------------------------------


LIB, TOOL = "entity:library:", "entity:tool:"
RULE_CASES = [
    ("We use Kuzu for the graph.", ("memory", "uses", TOOL + "Kuzu")),
    ("FastAPI is built on Starlette.", (LIB + "FastAPI", "uses", LIB + "Starlette")),
    ("I prefer pnpm over npm.", ("memory", "prefers", TOOL + "pnpm")),
    ("pydantic-core belongs to Pydantic.", (LIB + "pydantic-core", "belongs_to", LIB + "Pydantic")),
    ("Ruff conflicts with Black on quotes.", (TOOL + "Ruff", "conflicts_with", TOOL + "Black")),
    (
        "A conflict between Jest and Vitest globals.",
        (TOOL + "Jest", "conflicts_with", TOOL + "Vitest"),
    ),
    ("We replaced Jest with Vitest.", (TOOL + "Vitest", "supersedes", TOOL + "Jest")),
    ("We use Solid instead of React now.", (LIB + "Solid", "supersedes", LIB + "React")),
    ("Webpack was replaced by Vite.", (TOOL + "Vite", "supersedes", TOOL + "webpack")),
    ("The server is located in Frankfurt.", ("memory", "located_at", "entity:place:Frankfurt")),
    ("We moved the API from Heroku to Fly.io.", (TOOL + "Fly.io", "supersedes", TOOL + "Heroku")),
    ("According to the FastAPI docs, lifespan wins.", ("memory", "cites", LIB + "FastAPI")),
    ("我们使用 Redis 做缓存。", ("memory", "uses", TOOL + "Redis")),
    ("我更喜欢 Vue。", ("memory", "prefers", LIB + "Vue")),
    ("Ruff 与 Black 冲突。", (TOOL + "Ruff", "conflicts_with", TOOL + "Black")),
    ("pydantic-core 属于 Pydantic。", (LIB + "pydantic-core", "belongs_to", LIB + "Pydantic")),
    ("API 运行在 Kubernetes 上。", ("memory", "runs_on", TOOL + "Kubernetes")),
    ("MySQL 被 PostgreSQL 取代了。", (TOOL + "PostgreSQL", "supersedes", TOOL + "MySQL")),
    ("用 Vitest 替换了 Jest。", (TOOL + "Vitest", "supersedes", TOOL + "Jest")),
    ("我们放弃了 Flask,改用 FastAPI。", (LIB + "FastAPI", "supersedes", LIB + "Flask")),
    ("服务器位于法兰克福。", ("memory", "located_at", "entity:place:法兰克福")),
    ("参考 SQLite 官方文档。", ("memory", "cites", TOOL + "SQLite")),
]


@pytest.mark.parametrize(("text", "expected"), RULE_CASES)
def test_relation_rules(extractor: Extractor, text: str, expected: tuple[str, str, str]) -> None:
    result = extractor.extract(text)
    assert expected in triples(result)


def test_prefer_over_does_not_prefer_the_loser(extractor: Extractor) -> None:
    result = extractor.extract("I prefer pnpm over npm.")
    assert ("memory", "prefers", "entity:tool:npm") not in triples(result)


def test_works_on_takes_a_person_subject(extractor: Extractor) -> None:
    result = extractor.extract("@alice works on memoryd. @bob 负责 memoryd。", known=[MEMORYD])
    assert ("entity:person:alice", "works_on", MEMORYD.id) in triples(result)
    assert ("entity:person:bob", "works_on", MEMORYD.id) in triples(result)


@pytest.mark.parametrize(
    ("text", "predicate", "etype"),
    [
        ("We moved to Hetzner last week.", Predicate.USES, EntityType.TOOL),
        ("The staging box runs on Hetzner.", Predicate.RUNS_ON, EntityType.TOOL),
        ("The team is based in Tavira.", Predicate.LOCATED_AT, EntityType.PLACE),
    ],
)
def test_unknown_name_in_a_relation_slot_is_guessed(
    extractor: Extractor, text: str, predicate: Predicate, etype: EntityType
) -> None:
    result = extractor.extract(text)
    [guess] = result.entities
    assert guess.type is etype
    assert guess.confidence < 0.5
    assert relation(result, "memory", predicate, guess.id) <= guess.confidence + 0.3


def test_everyday_word_in_a_relation_slot_is_not_guessed(extractor: Extractor) -> None:
    result = extractor.extract("We use Spring for the config and moved to Docker.")
    assert ids(result) == {"entity:tool:Docker"}


def test_causal_language_raises_confidence(extractor: Extractor) -> None:
    plain = extractor.extract("We use Kuzu for the graph.")
    causal = extractor.extract("We use Kuzu for the graph because it is embedded.")
    kuzu = "entity:tool:Kuzu"
    assert relation(causal, "memory", Predicate.USES, kuzu) > relation(
        plain, "memory", Predicate.USES, kuzu
    )
    assert not [n for n in plain.notes if "language:" in n and n != "language: en"]


def test_every_entity_is_mentioned_and_relations_stay_inside(extractor: Extractor) -> None:
    text = (
        "We switched from Webpack to Vite, and the API runs on Kubernetes. @carol prefers "
        "pnpm; see https://vitejs.dev/guide for details. 我们用 Redis 做缓存。"
    )
    result = extractor.extract(text, known=[MEMORYD])
    entity_ids = ids(result)
    mentioned = {r.object for r in result.relations if r.predicate is Predicate.MENTIONS}
    assert mentioned == entity_ids
    for rel in result.relations:
        assert rel.subject in entity_ids | {"memory"}
        assert rel.object in entity_ids
        assert rel.subject != rel.object
    assert len(triples(result)) == len(result.relations)


# --- spans, titles, mixed and long text --------------------------------------------------------


def test_title_is_extracted_and_spans_are_relative_to_the_body(extractor: Extractor) -> None:
    result = extractor.extract("Kuzu is fast.", title="Moving the graph to Kuzu")
    [kuzu] = result.entities
    assert kuzu.spans == [(0, 4)]


def test_mixed_language_text(extractor: Extractor) -> None:
    result = extractor.extract("迁移计划: we switched from webpack to Vite, 然后用 Bun 跑测试。")
    assert relation(result, "entity:tool:Vite", Predicate.SUPERSEDES, "entity:tool:webpack") > 0.6
    assert "entity:tool:Bun" in ids(result)


def test_empty_text_gives_an_empty_extraction(extractor: Extractor) -> None:
    assert extractor.extract("   \n") == Extraction()


def test_spans_point_at_the_surface(extractor: Extractor) -> None:
    text = LONG_TEXT
    result = extractor.extract(text, known=[POSTGRES, MEMORYD])
    assert len(result.entities) > 20
    for entity in result.entities:
        forms = {normalise_name(s) for s in (entity.name, *entity.aliases)}
        for start, end in entity.spans:
            assert normalise_name(text[start:end]) in forms, (entity.name, text[start:end])


def test_concurrent_callers_get_the_same_results(extractor: Extractor) -> None:
    jobs = [
        ("We switched from React to Solid because the bundle was too big.", ()),
        ("我们决定从 MySQL 切到 PostgreSQL,因为需要 JSONB。", (POSTGRES,)),
        ("Sessions live in Postgres; memoryd runs on Linux.", (POSTGRES, MEMORYD)),
        ("@alice reviewed src/memoryd/graph/store.py", ()),
    ] * 6
    expected = [extractor.extract(text, known=list(known)) for text, known in jobs]
    fresh = Extractor()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: fresh.extract(job[0], known=list(job[1])), jobs))
    assert results == expected


# --- optional pretrained NER -------------------------------------------------------------------


def test_missing_spacy_model_warns_once_and_extraction_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    x = Extractor(spacy_model="xx_memoryd_model_that_is_not_installed")
    with caplog.at_level(logging.WARNING, logger="memoryd.extraction"):
        first = x.extract("We use Kuzu.")
        second = x.extract("We use Kuzu again.")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "not installed" in warnings[0].getMessage()
    assert "entity:tool:Kuzu" in ids(first)
    assert "entity:tool:Kuzu" in ids(second)
    assert "ner" not in first.stages
    assert any(n.startswith("ner unavailable") for n in second.notes)


def test_pretrained_model_adds_named_entities(tmp_path: Path) -> None:
    import spacy

    # A stand-in for a pretrained model: a rule component saved under the name "ner".
    nlp = spacy.blank("en")
    ruler: Any = nlp.add_pipe("entity_ruler", name="ner")
    ruler.add_patterns(
        [
            {"label": "PERSON", "pattern": "Ada Lovelace"},
            {"label": "GPE", "pattern": "Tavira"},
            {"label": "DATE", "pattern": "Monday"},
        ]
    )
    nlp.to_disk(tmp_path / "model")
    x = Extractor(spacy_model=str(tmp_path / "model"))
    result = x.extract("Ada Lovelace flew to Tavira on Monday.")
    by_id = {e.id: e for e in result.entities}
    assert by_id["entity:person:Ada Lovelace"].stage == "ner"
    assert by_id["entity:place:Tavira"].stage == "ner"  # not in the gazetteer
    assert not any("Monday" in i for i in by_id)
    assert "ner" in result.stages


LONG_TEXT = """\
## Session 2026-05-18

We switched the frontend from React to Solid because the bundle was too big, and moved the API
from Heroku to Fly.io. The API runs on Kubernetes on AWS (us-east-1). @alice reviewed
src/memoryd/graph/store.py and suggested we use `httpx` instead of requests for the client.

- Ran `pip install fastapi uvicorn` and `npm install zod`.
- The GraphStore protocol now wraps Kuzu; LadybugDB is a drop-in fork.
- See https://docs.kuzudb.com/concurrency for the lock error, and PEP 8 for naming.
- Alice Chen works on memoryd; she prefers ruff over Black.
- Sessions stay in Postgres until the migration to SQLite is done.

Decided to keep SQLite for governance because it needs no server. pytest runs with
filterwarnings=error. Next: wire the MCP server into Claude Code and Cursor.

我们决定从 MySQL 切到 PostgreSQL,因为需要 JSONB。记忆引擎运行在 Kubernetes 上,用 Redis 做缓存。
@bob 负责「记忆引擎」的开发,他更喜欢 FastAPI 而不是 Flask。参考 SQLite 官方文档。
"""


# -- determinism (issue 13 item 5): a function of the text and the set of known entities --
def _dump(extractor: Extractor, text: str, known: Sequence[KnownEntity]) -> list[tuple[str, float]]:
    found = extractor.extract(text, known=known)
    return sorted((e.id, e.confidence) for e in found.entities)


def test_extraction_is_the_same_from_a_grown_known_index_as_from_a_fresh_one() -> None:
    """The known-entity index is cached and grown as the graph gains entities; a surface two
    entities share ("stripe": the tool's name, the company's alias) must stand for the same
    one whether the index was grown or built at once, in whatever order the entities came."""
    stripe = KnownEntity(id="entity:tool:Stripe", name="Stripe", type=EntityType.TOOL)
    company = KnownEntity(
        id="entity:organization:Stripe Payments",
        name="Stripe Payments",
        type=EntityType.ORGANIZATION,
        aliases=["stripe"],
    )
    go = KnownEntity(id="entity:tool:Go", name="Go", type=EntityType.TOOL)
    verb = KnownEntity(id="entity:concept:go", name="go", type=EntityType.CONCEPT)
    text = "Billing moved to stripe last week. Go services call it through the SDK."
    everything = sorted([stripe, company, go, verb], key=lambda k: k.id)  # as the service does

    grown = Extractor()
    grown.extract("warm the cache", known=[stripe, go])  # the graph held these two first
    fresh = _dump(Extractor(), text, everything)
    assert _dump(grown, text, everything) == fresh
    assert _dump(Extractor(), text, everything[::-1]) == fresh
    assert ("entity:tool:Stripe", pytest.approx(0.95)) in fresh


def test_a_cue_raises_only_its_own_sentence(extractor: Extractor) -> None:
    """Decision and causal cues are looked for in the whole text once, then per sentence:
    a cue at a sentence's edge still counts there, and never in the sentence before it."""
    plain = extractor.extract("We use Kuzu.")
    kuzu = "entity:tool:Kuzu"
    base = relation(plain, "memory", Predicate.USES, kuzu)
    assert not [n for n in plain.notes if n.startswith(("decision", "causal"))]
    later = extractor.extract("We use Kuzu. We use Redis, because it is fast")
    assert relation(later, "memory", Predicate.USES, kuzu) == base
    assert relation(later, "memory", Predicate.USES, "entity:tool:Redis") > base
    assert "causal language: because" in later.notes
    opening = extractor.extract("Decided to use Kuzu.")
    assert relation(opening, "memory", Predicate.USES, kuzu) > base
    assert "decision language: decided to" in opening.notes
    curly = extractor.extract("We use Kuzu. We use Redis, because it’s fast")  # not ASCII
    assert relation(curly, "memory", Predicate.USES, kuzu) == base
    assert relation(curly, "memory", Predicate.USES, "entity:tool:Redis") > base
    assert "causal language: because" in curly.notes


def test_jieba_cut_of_ascii_words_is_jiebas() -> None:
    """`JiebaCut` cuts plain-ASCII blocks itself: the same words as `jieba.cut` for mixed
    text, the dictionary's ASCII words ("C++", "AT&T"), numbers, versions, paths and the
    labelled Chinese sentences."""
    import jieba

    from memoryd.extraction.spacy_stages import JiebaCut
    from tests.entity_gold import load_items

    texts = [
        "Upgraded Kubernetes (300000)\n\n把存储从Grafana迁移到Docker,查询延迟下降了一半。 #300000",
        "用C++和c#重写, AT&T 的 API v2.1.0 提升了 50% 性能; see src/app.py and a-b_c.d",
        "x y 1 2 3.14 3.14.15 100% 50%off foo.bar.baz --frozen-lockfile K8s k8s集群 A B AT",
        "AB型 A股 T恤 iPhone Cplusplus at&t AA制 ABC",
        "混合mixed文本text和numbers123以及SQL查询",
        "",
        "   \n\t",
        *(item.text for item in load_items() if any("\u4e00" <= c <= "\u9fff" for c in item.text)),
    ]
    fast = JiebaCut(jieba)
    assert list(fast.cut(texts[0])) == list(jieba.cut(texts[0]))  # loads the dictionary
    assert jieba.dt.initialized
    for text in texts:
        assert list(fast.cut(text, cut_all=False)) == list(jieba.cut(text, cut_all=False)), text
    assert list(fast.cut(texts[0], cut_all=True)) == list(jieba.cut(texts[0], cut_all=True))


def test_blank_pipelines_give_new_strings_their_lower_case_only() -> None:
    """A blank pipeline's new lexemes carry LOWER (what the case-blind phrase matcher
    compares) and no other lexical attribute, which nothing in extraction reads."""
    from spacy.attrs import LOWER
    from spacy.matcher import PhraseMatcher

    from memoryd.extraction.spacy_stages import blank_pipeline, match_phrases

    for lang, text in (("en", "We moved to QuuxDB today"), ("zh", "我们迁移到QuuxDB了")):
        nlp = blank_pipeline(lang)
        assert list(nlp.vocab.lex_attr_getters) == [LOWER]
        doc = nlp.make_doc(text)
        assert [t.lower_ for t in doc] == [t.text.lower() for t in doc]
        matcher = PhraseMatcher(nlp.vocab, attr="LOWER")
        matcher.add("7", [nlp.make_doc("quuxdb")])
        start = text.index("QuuxDB")
        assert match_phrases(doc, [matcher]) == [(start, start + 6, 7)]
