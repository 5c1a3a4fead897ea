"""A transcript reads the same whichever parser decodes it: the stdlib for one up to
`ORJSON_FROM_BYTES` (the hook then never imports orjson), orjson for a larger one."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.capture import transcripts

FIXTURES = Path("/work/shared/interop/fixtures")
needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason="interop fixtures not available (/work/shared is absent)"
)
TRANSCRIPTS = ("claude_code_transcript.jsonl", "codex_rollout.jsonl", "openclaw_session.jsonl")
ODD_LINES = [
    b'{"n": NaN, "big": 123456789012345678901234567890}',  # orjson refuses both
    b'{"text": "caf\\u00e9 \\ud83d\\ude00", "x": [1, 2.5, -0.0, 1e300, null, true]}',
    b'{"unterminated": "',
    b"not json at all",
    b"[" * 3000 + b"]" * 3000,  # nested deeper than either parser goes
    b'"a bare string"',
    '{"ключ": "значение", "键": "值"}'.encode(),
]


@needs_fixtures
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_both_parsers_read_every_line_alike(name: str) -> None:
    lines = [line for line in (FIXTURES / name).read_bytes().split(b"\n") if line.strip()]
    assert lines
    for line in [*lines, *ODD_LINES]:
        assert transcripts._decode(line) == transcripts._decode_fast(line), line[:80]


@needs_fixtures
@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_a_transcript_past_the_threshold_reads_as_one_below_it(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / name
    path.write_bytes((FIXTURES / name).read_bytes() + b"\n".join(ODD_LINES) + b"\n")
    below = transcripts.read_jsonl(path, 1 << 20)
    monkeypatch.setattr(transcripts, "ORJSON_FROM_BYTES", 100)
    decoded: list[bytes] = []
    fast = transcripts._decode_fast

    def counted(line: bytes) -> object:
        decoded.append(line)
        return fast(line)

    monkeypatch.setattr(transcripts, "_decode_fast", counted)
    assert transcripts.read_jsonl(path, 1 << 20) == below
    assert decoded  # orjson read it
