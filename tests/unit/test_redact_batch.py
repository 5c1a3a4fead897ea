"""`redact.fields.one_batch`: a text met twice in a batch is redacted once, to the same
result as `redact`, and nothing is kept once the batch ends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.models import Frontmatter, Predicate, RelationRef
from memoryd.redact import clean_slug as raw_clean_slug
from memoryd.redact import fields, redact
from memoryd.redact.fields import one_batch, redact_field

CORPUS = Path(__file__).resolve().parents[1] / "data" / "secrets"


def corpus() -> list[str]:
    positives = [
        json.loads(line)["text"]
        for line in (CORPUS / "positives.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    negatives = (CORPUS / "negatives.txt").read_text(encoding="utf-8").splitlines()
    return positives + [line for line in negatives if line.strip()]


def test_batch_redacts_as_redact_does_on_the_secret_corpus() -> None:
    texts = corpus()
    assert len(texts) > 100
    want = [redact(t) for t in texts]
    with one_batch():
        first = [redact_field(t) for t in texts]
        again = [redact_field(t) for t in texts]  # from the batch's memo
    assert first == want
    assert again == want
    assert any(w != t for w, t in zip(want, texts, strict=True))  # secrets were hidden


def test_a_repeated_text_is_redacted_once_and_forgotten_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def counting(text: str) -> str:
        calls.append(text)
        return redact(text)

    monkeypatch.setattr(fields, "redact", counting)
    with one_batch():
        for _ in range(5):
            assert redact_field("mcp-memory") == "mcp-memory"
        memo = fields._BATCH.get()
        assert memo == {"mcp-memory": "mcp-memory"}
    assert calls == ["mcp-memory"]
    assert memo == {}  # cleared: no plaintext outlives the batch
    assert fields._BATCH.get() is None
    redact_field("mcp-memory")
    redact_field("mcp-memory")
    assert len(calls) == 3  # outside a batch every call redacts


def test_a_span_two_rules_find_is_named_alike_in_every_process() -> None:
    """Woken rules run in the config's order, not a hash-seeded set's: the vault's
    `[REDACTED:kind]` for one secret must not depend on which process wrote it."""
    script = (
        "import json, sys; from memoryd.redact import redact; "
        "print(json.dumps([redact(t) for t in json.load(sys.stdin)]))"
    )
    texts = json.dumps(corpus())
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            input=texts,
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PATH": ""},
        ).stdout
        for seed in range(1, 9)
    }
    assert len(outputs) == 1


def test_a_slug_is_cleaned_once_in_a_batch_as_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_prepare` cleans a memory's slug and the cleaning after extraction meets it again:
    inside `one_batch` the second time is the first's result, and nothing is kept after."""
    slugs = ["2026-05-18-use-solid-3f9a1c", f"deploy-key-{'ghp_' + 'a1B2c3D4e5F6g7H8i9J0' * 2}"]
    want = [fields.clean_slug(s) for s in slugs]
    assert want[0] == slugs[0]
    assert want[1] != slugs[1]  # the token is gone
    calls: list[str] = []

    def counting(slug: str) -> str:
        calls.append(slug)
        return raw_clean_slug(slug)

    monkeypatch.setattr(fields, "_clean_slug", counting)
    with one_batch():
        assert [fields.clean_slug(s) for s in slugs * 3] == want * 3
        memo = fields._SLUGS.get()
    assert calls == slugs
    assert memo == {}
    assert fields._SLUGS.get() is None


def _meta(**extra: object) -> Frontmatter:
    return Frontmatter.model_validate(
        {
            "title": "Use Solid",
            "slug": "2026-05-18-use-solid-3f9a1c",
            "type": "decision",
            "scope_hash": "0" * 12,
            "source": "cli",
            "created_at": "2026-05-18T10:00:00Z",
            "tags": ["web"],
            **extra,
        }
    )


def test_clean_facts_is_clean_meta_of_a_cleaned_frontmatter_with_facts_added() -> None:
    """After extraction adds observations and relations to a cleaned frontmatter, cleaning
    only those is the whole `clean_meta`: the same object when they hold no secret, the
    same redacted copy when one does."""
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
    meta = fields.clean_meta(_meta())
    plain = meta.model_copy(deep=True)
    plain.observations = ["tool:solid"]
    plain.relations = [
        RelationRef(predicate=Predicate.MENTIONS, object="tool:react", confidence=0.5)
    ]
    assert fields.clean_facts(plain) is plain
    assert fields.clean_meta(plain) is plain
    for secret in (
        {"observations": [f"tool:{token}"]},
        {"relations": [RelationRef(predicate=Predicate.USES, object="tool:solid", label=token)]},
    ):
        dirty = meta.model_copy(update=secret)
        cleaned = fields.clean_facts(dirty)
        assert cleaned == fields.clean_meta(dirty)
        assert token not in cleaned.model_dump_json()
