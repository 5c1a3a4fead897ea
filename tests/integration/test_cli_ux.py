"""What a new user meets at the terminal: limits named in one line, stored text that cannot
drive the terminal, lists that say when they stop, slugs that survive copying, and the same
answers embedded and through the daemon."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from memoryd.cli.main import app
from memoryd.config import load_settings
from memoryd.models import MAX_QUERY_CHARS, SLUG_RE, MemoryDraft, MemoryType
from memoryd.service import slugify
from memoryd.wiring import open_service
from tests.daemon_harness import running, uds_client

runner = CliRunner()
LONG_QUERY = "word " * 20_000
EVIL_TITLE = "evil \x1b[31mred\x1b]0;pwned\x07 \x9b2J end"
EVIL_BODY = "before \x1b[2J\x1b[H after\nsecond line\tand a tab \u202eesrever"


def cli(home: Path, *args: str, input: str | bytes | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--home", str(home)], input=input)
    return result.exit_code, result.stdout, result.stderr


def record(home: Path, project: Path, title: str, body: str, type: str = "fact") -> str:
    code, out, err = cli(
        home, "record", "--type", type, "--title", title, "--body", body, "--scope", str(project)
    )
    assert code == 0, err
    return out.strip()


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "pydantic" not in err
    assert "Traceback" not in err
    return lines[0]


# -- the query length limit -------------------------------------------------------------
def test_a_long_query_is_refused_with_the_limit_embedded(home: Path, project: Path) -> None:
    record(home, project, "Kafka retention", "Kafka keeps events for seven days.")
    for command in ("recall", "search"):
        code, _, err = cli(home, command, LONG_QUERY)
        assert code == 2, err
        line = one_error_line(err)
        assert f"the query is {len(LONG_QUERY)} characters" in line
        assert f"at most {MAX_QUERY_CHARS}" in line
    # at the limit it is still a query
    code, out, err = cli(home, "recall", "kafka " + "x" * (MAX_QUERY_CHARS - 6), "--json")
    assert code == 0, err
    assert json.loads(out)["hits"][0]["title"] == "Kafka retention"


def test_an_empty_or_blank_query_is_refused_by_recall_and_search(home: Path, project: Path) -> None:
    """The same rule as HTTP and MCP (issue 29): exit 2, not `no memories match` and 0."""
    record(home, project, "Kafka retention", "Kafka keeps events for seven days.")
    for command in ("recall", "search"):
        for query in ("", "  \t"):
            code, out, err = cli(home, command, query)
            assert code == 2, (command, query, out, err)
            line = one_error_line(err)
            assert line.startswith("error: the query is empty (hint: "), line


def test_through_the_daemon_recall_posts_its_query_with_the_same_limit(
    home: Path, project: Path
) -> None:
    record(home, project, "Kafka retention", "Kafka keeps events for seven days.")
    with running(home) as daemon, uds_client(daemon.home) as http:
        for command in ("recall", "search"):
            code, _, err = cli(home, command, LONG_QUERY)
            assert code == 2, err
            line = one_error_line(err)
            assert f"at most {MAX_QUERY_CHARS}" in line
        # a long query within the limit: percent-encoded, its URL would be ~30 kB
        wide = "kafka retention " + "卡夫卡 " * 990
        assert len(wide) <= MAX_QUERY_CHARS
        code, out, err = cli(home, "recall", wide, "--json")
        assert code == 0, err
        assert json.loads(out)["hits"][0]["title"] == "Kafka retention"

        body = {"q": "kafka retention", "limit": 5, "track": False}
        posted = http.post("/v1/recall", json=body)
        got = http.get("/v1/recall", params={"q": "kafka retention", "limit": 5, "track": "false"})
        assert posted.status_code == got.status_code == 200, posted.text
        assert posted.json() == got.json()
        record(home, project, "Kafka partitions", "Kafka topics have twelve partitions.")
        # A prompt naming something specific: "kafka" alone is in every memory of the scope,
        # too weak (calibrated) for inject to add anything.
        prompt = "how many partitions do kafka topics have"
        for name in ("limit", "k"):  # the API's name, and the hooks' older one
            context = http.post("/v1/recall/context", json={"prompt": prompt, name: 1})
            assert context.status_code == 200, context.text
            assert len(context.json()["items"]) == 1
        for answer in (
            http.post("/v1/recall", json={"q": LONG_QUERY}),
            http.get("/v1/search", params={"q": "w " * 2_500}),
        ):
            assert answer.status_code == 422, answer.text
            assert f"at most {MAX_QUERY_CHARS}" in answer.json()["error"]["message"]


# -- validation errors ------------------------------------------------------------------
def test_a_bad_title_is_one_line_naming_the_field_and_the_limit(home: Path, project: Path) -> None:
    long_title = "t" * 600
    code, _, err = cli(home, "record", "--type", "fact", "--title", long_title, "--body", "x")
    assert code == 2
    assert "title: at most 500 characters (got 600)" in one_error_line(err)
    code, _, err = cli(home, "record", "--type", "fact", "--title", "caf\udce9", "--body", "x")
    assert code == 2
    assert "--title is not UTF-8 text" in one_error_line(err)
    with running(home) as daemon, uds_client(daemon.home) as http:
        code, _, err = cli(
            home,
            "record",
            "--type",
            "fact",
            "--title",
            long_title,
            "--body",
            "x",
            "--scope",
            str(project),
        )
        assert code == 2
        assert "title: at most 500 characters (got 600)" in one_error_line(err)
        answer = http.post(
            "/v1/memories",
            json={"type": "fact", "title": long_title, "body": "x", "scope": str(project)},
        )
        assert answer.status_code == 422
        assert answer.json()["error"]["message"] == (
            "invalid request: title: at most 500 characters (got 600)"
        )


# -- empty bodies -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "stdin"),
    [([], ""), ([], "  \n\t\n"), (["--body", ""], None), (["--body", "   "], None)],
)
def test_an_empty_body_is_refused(
    home: Path, project: Path, args: list[str], stdin: str | None
) -> None:
    code, out, err = cli(
        home,
        "record",
        "--type",
        "fact",
        "--title",
        "Empty",
        "--scope",
        str(project),
        *args,
        input=stdin,
    )
    assert code == 2, out
    assert out == ""
    line = one_error_line(err)
    assert "the body is empty" in line
    assert "--body TEXT" in line
    code, out, _ = cli(home, "list", "--json")
    assert json.loads(out) == []


# -- terminal escapes -------------------------------------------------------------------
def test_control_characters_are_dropped_on_the_way_in(home: Path, project: Path) -> None:
    """A recorded title and body keep no terminal escape or C0/C1 control (see
    `redact.drop_controls`); the bidi override is text, and is kept."""
    slug = record(home, project, EVIL_TITLE, EVIL_BODY)
    code, out, _ = cli(home, "get", slug, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["meta"]["title"] == "evil red 2J end"
    assert data["body"] == "before  after\nsecond line\tand a tab \u202eesrever"


def test_control_characters_in_hand_edited_files_are_shown_escaped_but_json_is_exact(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault is plain markdown a user may edit: escapes written there by hand reach the
    stores by `reindex`. Tables and `get` show them escaped; `--json` gives them exactly."""
    monkeypatch.setenv("COLUMNS", "200")
    slug = record(home, project, "evil red end", "before after")
    (path,) = home.glob(f"scopes/*/**/{slug}.md")
    text = path.read_text(encoding="utf-8")
    text = text.replace("title: evil red end", f"title: {json.dumps(EVIL_TITLE)}")
    text = text.replace("before after", EVIL_BODY)
    path.write_text(text, encoding="utf-8")
    code, _, err = cli(home, "reindex")
    assert code == 0, err
    for args in (["list"], ["get", slug], ["recall", "evil red"], ["search", "evil"]):
        code, out, err = cli(home, *args)
        assert code == 0, err
        for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert raw not in out, (args, out)
        # tables show the title escaped; `get` shows the frontmatter, which YAML escapes
        assert ("\\u001b[31mred" if args[0] == "get" else "\\x1b[31mred") in out, out
    code, out, _ = cli(home, "get", slug)
    assert "\\x1b[2J\\x1b[H after\nsecond line\tand a tab \\u202eesrever" in out
    code, out, _ = cli(home, "get", slug, "--json")
    data = json.loads(out)
    assert (data["meta"]["title"], data["body"]) == (EVIL_TITLE, EVIL_BODY)
    code, out, _ = cli(home, "list", "--json")
    assert json.loads(out)[0]["title"] == EVIL_TITLE


# -- list limits and the --limit flag ---------------------------------------------------
def test_list_says_when_it_stops_at_the_limit(home: Path, project: Path) -> None:
    with open_service(load_settings(home)) as svc:
        svc.record_many(
            [
                MemoryDraft(
                    type=MemoryType.FACT,
                    title=f"fact number {n}",
                    body=f"the body of fact {n}",
                    scope_path=project,
                )
                for n in range(160)
            ]
        )
    code, out, err = cli(home, "list", "--json")
    assert code == 0
    assert len(json.loads(out)) == 100
    assert "showing 100 of 160 (--limit 100" in err
    code, out, err = cli(home, "list", "-k", "30", "--offset", "140", "--json")
    assert len(json.loads(out)) == 20
    assert err == ""
    code, out, err = cli(home, "list", "--limit", "50", "--offset", "50", "--type", "fact")
    assert "showing 51-100 of 160" in err
    code, out, err = cli(home, "list", "--limit", "200")
    assert code == 0
    assert "showing" not in err
    with running(home):
        code, out, err = cli(home, "list", "--json")
        assert len(json.loads(out)) == 100
        assert "showing 100 of 160 (--limit 100" in err


def test_limit_is_one_flag_everywhere(home: Path, project: Path) -> None:
    for n in range(3):
        record(home, project, f"Kafka note {n}", f"Kafka partition note number {n}.")
    for flag in ("--limit", "-k"):
        command: list[str]
        for command in (
            ["recall", "kafka"],
            ["search", "kafka"],
            ["list"],
            ["entity", "list"],
            ["audit"],
            ["graph", "query", "MATCH (m:Memory) RETURN m.slug"],
        ):
            code, out, err = cli(home, *command, flag, "2", "--json")
            assert code == 0, (command, err)
            data = json.loads(out)
            rows: Any = data.get("hits", data.get("rows")) if isinstance(data, dict) else data
            assert len(rows) <= 2, command
    for name in ("recall", "search", "list", "audit", "inject"):
        assert "--limit" in runner.invoke(app, [name, "--help"]).stdout, name


# -- slugs ------------------------------------------------------------------------------
def test_tables_never_cut_a_slug(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    slug = record(
        home,
        project,
        "Partition the Parquet files by event date rather than by ingestion date",
        "Partition by event date.",
    )
    assert len(slug) > 60
    for args in (["list"], ["recall", "parquet partition"], ["search", "parquet"]):
        code, out, err = cli(home, *args)
        assert code == 0, err
        assert any(slug in line for line in out.splitlines()), (args, out)
        assert "…" not in out


def test_cjk_titles_keep_their_characters_in_the_slug(home: Path, project: Path) -> None:
    slug = record(home, project, "数据库迁移到 Postgres", "从 MySQL 迁移到 PostgreSQL。")
    assert "数据库迁移到-postgres" in slug
    files = list(home.glob(f"scopes/*/facts/{slug}.md"))
    assert [f.name for f in files] == [f"{slug}.md"]
    code, out, err = cli(home, "get", slug, "--json")
    assert code == 0, err
    assert json.loads(out)["meta"]["slug"] == slug
    with running(home) as daemon, uds_client(daemon.home) as http:
        answer = http.get(f"/v1/memories/{quote(slug, safe='')}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["meta"]["title"] == "数据库迁移到 Postgres"
        code, out, err = cli(home, "get", slug)
        assert code == 0, err
        assert f'slug: "{slug}"' in out
    code, out, err = cli(home, "reindex")
    assert code == 0, err
    code, out, _ = cli(home, "list", "--json")
    assert [m["slug"] for m in json.loads(out)] == [slug]


@pytest.mark.parametrize(
    ("title", "words"),
    [
        ("数据库迁移到 Postgres", "数据库迁移到-postgres"),
        ("カフカの設定を見直す", "カフカの設定を見直す"),
        ("데이터베이스 이전 계획", "데이터베이스-이전-계획"),
        ("用React写前端", "用-react-写前端"),
        ("Café déjà vu", "cafe-deja-vu"),
        ("ＡＢＣ全角", "abc-全角"),
    ],
)
def test_slugs_keep_cjk_and_drop_accents(title: str, words: str) -> None:
    when = datetime(2026, 6, 15, tzinfo=UTC)
    slug = slugify(title, when)
    assert re.fullmatch(rf"2026-06-15-{re.escape(words)}-[0-9a-f]{{6}}", slug), slug
    assert SLUG_RE.match(slug)


# -- one score scale ----------------------------------------------------------------------
def test_search_shows_raw_bm25_only_with_explain(home: Path, project: Path) -> None:
    """recall's relevance is the 0-1 scale; search's raw BM25 is on none, so its table ranks
    the hits and names BM25 only with --explain (issue 29)."""
    record(home, project, "Kafka retention", "Kafka keeps events for seven days.")
    record(home, project, "Kafka consumers", "Kafka consumers commit offsets after a batch.")
    code, out, err = cli(home, "search", "kafka retention")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "slug" in line)
    assert re.findall(r"\w+", header) == ["slug", "type", "title", "matched"], header
    assert "bm25" not in out
    assert "score" not in out
    code, out, err = cli(home, "search", "kafka retention", "--explain")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "slug" in line)
    assert re.findall(r"\w+", header) == ["bm25", "slug", "type", "title", "matched"], header
    code, out, err = cli(home, "recall", "kafka retention")
    assert code == 0, err
    assert "relevance" in next(line for line in out.splitlines() if "slug" in line)
