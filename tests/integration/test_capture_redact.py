"""Secrets never reach the data dir: the redaction rules, and a grep of everything capture writes.

Every secret here is FAKE but in its real format, generated fresh for each run.
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

import pytest

from memoryd.config import Settings
from memoryd.redact import (
    entropy_floor,
    looks_random,
    redact,
    redact_excerpt,
    redact_json,
    safe_cut,
)
from tests.integration.test_capture import (
    FIXTURES,
    ClaudeTranscript,
    capture,
    failed_entries,
    fixture_json,
    needs_fixtures,
    session_files,
)

B62 = string.ascii_letters + string.digits
rng = random.Random()


@pytest.fixture(autouse=True)
def _no_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYD_CAPTURE__BUDGET_MS", "0")


def r(n: int, alphabet: str = B62) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def random_token(n: int) -> str:
    """A token the entropy rule recognises (it finds ~99% of random ones; the test is not
    about that rate but about what capture does with them)."""
    while True:
        token = r(n)
        if looks_random(token):
            return token


def b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def fake_secrets() -> dict[str, str]:
    """One fresh fake secret of each kind, in its real format."""
    pem_body = "\n".join(r(64, B62 + "+/") for _ in range(6))
    return {
        "anthropic_key": f"sk-ant-api03-{r(93, B62 + '-_')}AA",
        "openai_key": f"sk-proj-{r(48)}T3BlbkFJ{r(48)}",
        "openai_legacy": f"sk-{r(48)}",
        "aws_access_key": "AKIA" + r(16, string.ascii_uppercase + "234567"),
        "aws_secret_key": r(40, B62 + "/+"),
        "github_token": f"ghp_{r(36)}",
        "github_oauth": f"gho_{r(36)}",
        "github_pat": f"github_pat_{r(22)}_{r(59)}",
        "gitlab_token": f"glpat-{r(20)}",
        "slack_token": f"xoxb-{r(11, string.digits)}-{r(13, string.digits)}-{r(24)}",
        "slack_webhook": f"https://hooks.slack.com/services/T{r(8)}/B{r(8)}/{r(24)}",
        "google_api_key": f"AIza{r(35, B62 + '-_')}",
        "stripe_key": f"sk_live_{r(24)}",
        "npm_token": f"npm_{r(36)}",
        "huggingface_token": f"hf_{r(34, string.ascii_letters)}",
        "sendgrid_key": f"SG.{r(22)}.{r(43)}",
        "jwt": ".".join(
            [b64url({"alg": "HS256", "typ": "JWT"}), b64url({"sub": r(10)}), r(43, B62 + "-_")]
        ),
        "bearer": r(40, B62 + "._-"),
        "password": f"hunter2-{r(10)}",
        "passwd": f"Pa55-{r(12)}",
        "secret": r(18, string.ascii_lowercase),
        "json_api_key": r(32, string.ascii_lowercase + string.digits),
        "db_password": f"S3cr3t!{r(10)}",
        "mongo_password": r(16),
        "redis_password": r(20),
        "pem": f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n-----END RSA PRIVATE KEY-----",
        "openssh": (
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{pem_body}\n-----END OPENSSH PRIVATE KEY-----"
        ),
        "high_entropy": random_token(44),
    }


def secret_text(s: dict[str, str]) -> str:
    """The secrets as they show up in sessions: env files, commands, configs, code."""
    return f"""
export ANTHROPIC_API_KEY={s["anthropic_key"]}
client = OpenAI(api_key="{s["openai_key"]}")  # legacy {s["openai_legacy"]}
AWS_ACCESS_KEY_ID={s["aws_access_key"]}
aws_secret_access_key = {s["aws_secret_key"]}
git remote set-url origin https://{s["github_token"]}@github.com/acme/app.git
gh auth token -> {s["github_oauth"]} and {s["github_pat"]} and {s["gitlab_token"]}
SLACK_BOT={s["slack_token"]} posting to {s["slack_webhook"]}
maps.googleapis.com/?key={s["google_api_key"]}
stripe.api_key = '{s["stripe_key"]}'
//registry.npmjs.org/:_authToken={s["npm_token"]} hf {s["huggingface_token"]} {s["sendgrid_key"]}
curl -H "Authorization: Bearer {s["jwt"]}" https://api.acme.test
curl -H 'Authorization: Bearer {s["bearer"]}' https://api.acme.test
password={s["password"]}
passwd: {s["passwd"]}
secret={s["secret"]}
{{"api_key": "{s["json_api_key"]}"}}
DATABASE_URL=postgres://admin:{s["db_password"]}@db.internal:5432/app
MONGO=mongodb+srv://app:{s["mongo_password"]}@cluster0.mongodb.net/prod
REDIS_URL=redis://:{s["redis_password"]}@cache:6379/0
{s["pem"]}
{s["openssh"]}
the deploy token is {s["high_entropy"]} (no label)
"""


def pieces(secret: str) -> list[str]:
    """The secret and its 16-character chunks: a half-kept secret is a leak too."""
    body = secret.split("-----")[2] if secret.startswith("-----") else secret
    body = body.replace("\n", "")
    return [secret, *(body[i : i + 16] for i in range(0, max(1, len(body) - 15), 8))]


# -- the rules --------------------------------------------------------------------------------
def test_every_format_is_redacted_with_its_kind() -> None:
    s = fake_secrets()
    out = redact(secret_text(s))
    for name, secret in s.items():
        for piece in pieces(secret):
            assert piece not in out, (name, piece)
    for kind in (
        "anthropic-api-key",  # gitleaks' rule ids
        "github-pat",
        "private-key",
        "curl-auth-header",
        "aws-access-token",
        "github-fine-grained-pat",
        "gitlab-pat",
        "slack-bot-token",
        "slack-webhook-url",
        "gcp-api-key",
        "huggingface-access-token",
        "sendgrid-api-token",
        "generic-api-key",
        "aws_secret_key",  # this module's own
        "secret",
        "password",
        "high_entropy",
    ):
        assert f"[REDACTED:{kind}]" in out, kind
    assert "postgres://admin:[REDACTED:password]@db.internal" in out  # user and host kept


def test_what_is_not_a_secret_is_kept() -> None:
    keep = [
        "commit 3f1c9d2e8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d",  # git SHA
        "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "session 5f3c2a9e-8b1d-4c7e-9a2f-1d3e4b5c6a7f",  # UUID
        "model claude-sonnet-4-5-20250929",
        "src/memoryd/capture/summary.py and tests/test_capture_redact.py",
        "getUserById2FactorAuthToken HTTPServerErrorResponse404Handler",
        '"input_tokens": 1520, "max_tokens": 4096, token_count=12',
        "def login(password: str, token: str | None = None) -> None:",
        "user_password = password; token=access_token; secret=${SECRET}",
        'api_key = os.environ["API_KEY"]; password=getpass()',
        "passwords: see the vault (password manager)",
    ]
    for text in keep:
        assert redact(text) == text, text


def test_high_entropy_recall_grows_with_length() -> None:
    tokens = {n: [r(n) for _ in range(400)] for n in (24, 32, 64)}
    recall = {n: sum(looks_random(t) for t in ts) / len(ts) for n, ts in tokens.items()}
    assert recall[24] > 0.8
    assert recall[32] > 0.95
    assert recall[64] > 0.98
    assert entropy_floor(20) < entropy_floor(30) < entropy_floor(64) < entropy_floor(500)
    assert not looks_random("a" * 40)
    assert not looks_random("0123456789abcdef" * 3)  # hex is never redacted by entropy


def test_a_text_without_capitals_is_redacted_as_if_its_tokens_were_scanned() -> None:
    """`redact` skips the entropy scan of a text `lower` leaves as it is (slugs, entity ids,
    tags): a random token needs an upper-case letter, so the scan would find nothing there,
    while the rules that need no capital still run."""
    lower = string.ascii_lowercase + string.digits + "+/_-"
    for n in (20, 32, 64, 200):
        for _ in range(300):
            assert not looks_random(r(n, lower))
    token = random_token(40)
    assert redact(f"see {token.lower()} here") == f"see {token.lower()} here"
    assert redact(f"see {token} here") == "see [REDACTED:high_entropy] here"
    slack = "xoxb-123456789012-1234567890123-abcdefghijklmnop"
    assert redact(f"2026-12-05-{slack}-3f9a1c") == "2026-12-05-[REDACTED:slack-bot-token]"


def test_redact_json_keeps_the_payload_parseable() -> None:
    s = fake_secrets()
    payload = {
        "prompt": secret_text(s),
        "tool_input": {"password": "correct horse battery staple", "api_key": s["json_api_key"]},
        "input_tokens": 1520,
        "nested": [{"secret": s["secret"], "token": None}],
    }
    out = redact_json(payload)
    text = json.dumps(out)
    assert json.loads(text)["input_tokens"] == 1520
    assert out["tool_input"]["password"] == "[REDACTED:secret]"
    assert out["nested"][0]["token"] is None
    for secret in s.values():
        assert secret not in text


@pytest.mark.parametrize("kind", ["anthropic_key", "aws_secret_key", "pem", "high_entropy"])
def test_a_cut_never_keeps_half_a_secret(kind: str) -> None:
    """Secrets at every offset around the head and tail cuts of an excerpt."""
    for offset in range(540, 640, 3):
        secret = fake_secrets()[kind]
        label = "aws_secret_access_key = " if kind == "aws_secret_key" else "key "
        filler = "lorem ipsum dolor sit amet " * 200
        text = (
            filler[:offset] + label + secret + " " + filler + label + secret + " " + filler[:offset]
        )
        out = redact_excerpt(text, 600, 600)
        for piece in pieces(secret):
            assert piece not in out, (offset, piece)
        # safe_cut redacts what it cuts; what fits is redacted with the whole body afterwards.
        line = redact(safe_cut(filler[:offset] + label + secret + " tail", 600))
        for piece in pieces(secret):
            assert piece not in line, (offset, piece)
        assert out.count("[REDACTED:") == out.count("]") - out.count("characters skipped]")


# -- the whole data dir -----------------------------------------------------------------------
@needs_fixtures
def test_no_secret_reaches_the_data_dir(
    home: Path, project: Path, tmp_path: Path, settings: Settings
) -> None:
    """Capture transcripts, journals, failures and logs full of secrets, index them, then grep
    every file under the data dir — vault, inbox, journals, failed payloads, logs, audit, graph,
    search index — for every secret and every 16-character piece of one."""
    s = fake_secrets()
    text = secret_text(s)

    # 1. A Claude Code session with secrets in prompts, commands, tool output, edits and answers.
    transcript = ClaudeTranscript(tmp_path / "t.jsonl", "sess-secrets", str(project))
    transcript.prompt("Deploy with these settings:\n" + text)
    transcript.tool(
        "Bash", {"command": f"export OPENAI_API_KEY={s['openai_key']} && deploy"}, text, error=True
    )
    # The password is labelled in the command (a URL) and bare in the output: both are hidden.
    transcript.tool(
        "Bash",
        {"command": f"psql postgres://admin:{s['db_password']}@db/app -c 1"},
        "ERROR: password authentication failed for " + s["db_password"],
        error=True,
    )
    transcript.tool("Write", {"file_path": str(project / ".env"), "content": text}, "ok")
    transcript.say(f"I used the key {s['anthropic_key']} because the old one expired.\n" + text)
    long_prompt = (
        ("padding " * 70)[:590] + f"token={s['bearer']} " + "x " * 2000 + s["high_entropy"]
    )
    transcript.prompt(long_prompt)
    capture(home, "claude-code", transcript.payload(last_assistant_message="Done. " + text))

    # 2. Hook events of an agent without transcript: the journal, then the memory.
    cursor = {"conversation_id": "c-secret", "workspace_roots": [str(project)]}
    capture(home, "cursor", dict(cursor, hook_event_name="beforeSubmitPrompt", prompt=text))
    capture(
        home,
        "cursor",
        dict(
            cursor,
            hook_event_name="afterShellExecution",
            command=f"curl -u admin:{s['password']} https://x",
            output=text,
        ),
    )
    capture(home, "cursor", dict(cursor, hook_event_name="stop", status="completed"))

    # 3. Failures: broken JSON, and a missing transcript whose path holds a secret.
    capture(home, "claude-code", '{"session_id": "broken", "prompt": "' + text.replace('"', "'"))
    missing = fixture_json("hooks/claude_code/SessionEnd.stdin.json", cwd=str(project))
    missing["transcript_path"] = f"/nowhere/{s['github_token']}/t.jsonl"
    capture(home, "claude-code", missing)
    assert len(failed_entries(home)) == 2
    assert len(session_files(home)) == 2

    # 4. Index everything: graph, search index, audit log.
    from memoryd.wiring import open_service

    with open_service(settings) as svc:
        assert svc.drain_inbox() == 2
        rows = [svc.graph.get_memory(p.stem) for p in session_files(home)]
        assert all(row is not None for row in rows)
        graph_text = "".join(row.body + row.title for row in rows if row is not None)

    everything = [p for p in home.rglob("*") if p.is_file()]
    assert any("capture.log" in p.name for p in everything)
    assert any(p.suffix == ".stdin" for p in everything)
    assert any("sessions" in p.parts and p.suffix == ".jsonl" for p in everything)
    blobs = [(p, p.read_bytes()) for p in everything]
    for name, secret in s.items():
        for piece in pieces(secret):
            assert piece not in graph_text, (name, piece)
            for path, data in blobs:
                assert piece.encode() not in data, (name, piece, path)
    vault_text = "".join(p.read_text() for p in session_files(home))
    assert vault_text.count("[REDACTED:") > 20
    assert FIXTURES.is_dir()


def test_a_secret_holding_a_secret_word_by_chance_is_still_hidden() -> None:
    """Random values once passed for variable names because "pwd" occurred inside them."""
    text = "secret=hdcjvspwdgrkyiaxvd\npasswd: Pa55-OMMB27rnxPWD\ntoken=access_token\n"
    out = redact(text)
    assert "hdcjvspwdgrkyiaxvd" not in out
    assert "Pa55-OMMB27rnxPWD" not in out
    assert "token=access_token" in out
