from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memoryd.errors import BrokenMemoryFile, NotFound, ResourceExhausted, StorageError
from memoryd.models import Frontmatter, Memory, MemoryType, RelationRef
from memoryd.vault import Vault, _emit, _scalar, _text, atomic_write, parse, render


def sample(
    slug: str = "2026-05-18-use-solid-a1b2c3", body: str = "We use **Solid**.\n\n- fast"
) -> Memory:
    meta = Frontmatter(
        title="Use Solid",
        slug=slug,
        type="preference",
        scope_hash="d8e86b48589e",
        source="manual",
        created_at=datetime(2026, 5, 18, 22, 30, 12, tzinfo=UTC),
        tags=["solid"],
        triggers=["前端切换"],
    )
    return Memory(meta=meta, body=body)


def test_render_parse_round_trip(tmp_path: Path) -> None:
    memory = sample()
    text = render(memory)
    assert text.startswith("---\ntitle: Use Solid\n")
    assert "前端切换" in text  # unicode kept readable, not escaped
    parsed = parse(text, tmp_path / "x.md")
    assert parsed.meta == memory.meta
    assert parsed.body == memory.body


def test_write_places_file_by_scope_and_type(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    path = vault.write(sample())
    assert path == tmp_path / "scopes/d8e86b48589e/preferences/2026-05-18-use-solid-a1b2c3.md"
    assert vault.read(path).body == sample().body
    assert vault.find("2026-05-18-use-solid-a1b2c3") == path
    assert list(vault.iter_files()) == [path]
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no frontmatter here", "no frontmatter"),
        ("---\ntitle: x\n", "not closed"),
        ("---\ntitle: [unclosed\n---\nbody", "invalid YAML frontmatter"),
        ("---\n- a list\n---\nbody", "not a mapping"),
        (
            "---\ntitle: t\nslug: s\ntype: diary\nscope_hash: d8e86b48589e\nsource: m\n"
            "created_at: 2026-01-01T00:00:00Z\n---\nbody",
            "field 'type'",
        ),
    ],
)
def test_broken_files_name_file_and_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "broken.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BrokenMemoryFile, match=message) as info:
        Vault(tmp_path).read(path)
    assert str(path) in str(info.value)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.md"
    path.write_bytes("---\ntitle: caf\xe9\n---\n".encode("latin-1"))
    with pytest.raises(BrokenMemoryFile, match="not UTF-8"):
        Vault(tmp_path).read(path)


def test_missing_file_is_not_found_with_hint(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="missing") as info:
        Vault(tmp_path).read(tmp_path / "gone.md")
    assert "reindex" in info.value.hint


def test_full_disk_leaves_previous_file_intact(small_disk: Path) -> None:
    target = small_disk / "memory.md"
    target.write_text("the original", encoding="utf-8")
    with pytest.raises(ResourceExhausted, match="disk full"):
        atomic_write(target, b"x" * (4 * 1024 * 1024))
    assert target.read_text(encoding="utf-8") == "the original"
    assert [p.name for p in small_disk.iterdir()] == ["memory.md"]


def test_read_only_dir_is_a_clear_error(small_disk: Path) -> None:
    vault = Vault(small_disk)
    vault.write(sample())
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        with pytest.raises(StorageError, match="read-only"):
            vault.write(sample(slug="2026-05-18-second-ffffff"))
        assert vault.read(vault.path_for(sample())).body == sample().body
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)


def test_sensitive_memory_is_never_written_in_plaintext(tmp_path: Path) -> None:
    memory = sample()
    memory.sensitive = True
    with pytest.raises(StorageError, match="encrypted"):
        Vault(tmp_path).write(memory)
    assert not list(tmp_path.rglob("*.md"))


TRICKY = [
    "plain words",
    "yes",
    "No",
    "null",
    "~",
    "123",
    "1.5",
    "2026-05-18",
    "key: value",
    "has # hash",
    "trailing space ",
    " leading",
    "[brackets]",
    "{braces}",
    "a, b",
    "quote ' and \" double",
    "back\\slash",
    "multi\nline",
    "tab\there",
    "- dash",
    "* star",
    "&anchor",
    "!tag",
    "@at",
    "%percent",
    "`tick`",
    "中文标题:冒号",
    "「记忆引擎」",
    "emoji 🚀",
    "C++ / C#",
    "",
]


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_strings_round_trip(tmp_path: Path, text: str) -> None:
    memory = sample()
    memory.meta.category = text or None
    memory.meta.tags = [text, "x"] if text else ["x"]
    memory.meta.relations = [
        RelationRef.model_validate(
            {"predicate": "cites", "object": text or "o", "confidence": 1e-05}
        )
    ]
    if text.strip():
        memory.meta.title = text
    parsed = parse(render(memory), tmp_path / "t.md")
    assert parsed.meta == memory.meta


def _bulk(count: int, body: str) -> list[Memory]:
    memories = []
    for i in range(count):
        memory = sample(slug=f"2026-05-18-bulk-{i:06x}", body=body)
        kind = ("preference", "fact", "decision")[i % 3]
        memory.meta = memory.meta.model_copy(update={"type": MemoryType(kind)})
        memories.append(memory)
    return memories


def test_write_many_writes_every_file_whole_in_its_folder(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    memories = _bulk(60, "We use **Solid**.\n\n前端切换")
    written: list[Path] = []
    vault.write_many(memories, written)
    vault.sync_all()
    assert sorted(written) == sorted(vault.path_for(m) for m in memories)
    for memory in memories:
        path = vault.path_for(memory)
        assert path.parent.name == memory.meta.type.dir_name
        assert path.stat().st_mode & 0o777 == 0o600
        assert vault.read(path).model_dump(exclude={"path"}) == memory.model_dump(exclude={"path"})
    scope = vault.scope_dir("d8e86b48589e")
    assert not [p for p in scope.rglob(".*")], "temp files left behind"


def test_write_many_on_a_full_disk_names_it_and_lists_what_it_wrote(small_disk: Path) -> None:
    vault = Vault(small_disk)
    memories = _bulk(40, "x" * 100_000)  # 4 MB into a 2 MB disk
    written: list[Path] = []
    with pytest.raises(ResourceExhausted, match="disk full"):
        vault.write_many(memories, written)
    on_disk = sorted(p for p in small_disk.rglob("*") if p.is_file())
    assert written
    assert sorted(written) == on_disk  # only whole files, no temp file
    for path in written:
        assert vault.read(path).body == "x" * 100_000


def test_remembered_scalars_are_the_scalars_worked_out_afresh() -> None:
    """`_scalar` remembers strings (a bulk write's files repeat most values): asked once or
    again, a string, and an enum of the same text, come out as the uncached rule gives."""
    tricky = ["react", "yes", "No", "a #b", "trail ", "数据库", "x: y", "\x85\x7f", "", "-1", "1"]
    for _ in range(2):
        for text in tricky:
            assert _scalar(text) == _text.__wrapped__(text)
    assert _scalar(MemoryType.FACT) == _text.__wrapped__("fact") == "fact"
    assert [_scalar(v) for v in (None, True, 1, 0.5)] == ["null", "true", "1", "0.5"]


def test_strings_and_lists_of_strings_are_written_as_scalar_writes_them() -> None:
    """`_emit` writes a string and a list of strings without `_scalar` (a bulk write renders
    100k files): the lines are `_scalar`'s, and a quoted string is `json.dumps`'s."""
    tricky = ["react", "yes", "a #b", "trail ", "数据库", "x: y", "\x85\x7f", "", "\u2028"]
    tricky += ['say "hi"', "back\\slash", "tab\there", "2026-12-05-a-b-3f9a1c", "mcp-seq:17", "ü"]
    for text in tricky:
        data = {"s": text, "l": [text, "x"], "m": [MemoryType.FACT, text], "e": []}
        assert _emit(data) == [
            f"s: {_scalar(text)}",
            f"l: [{_scalar(text)}, x]",
            f"m: [fact, {_scalar(text)}]",
            "e: []",
        ]
        quoted = _text.__wrapped__(text)
        if quoted != text:
            want = json.dumps(text, ensure_ascii=False)
            assert quoted == re.sub("[\x7f-\x84\x86-\x9f]", lambda m: f"\\u{ord(m[0]):04x}", want)
