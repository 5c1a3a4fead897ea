"""schemathesis against the live OpenAPI of a real daemon: no 5xx, no death, every error in
one shape.

The daemon holds a few memories, entities and relations first: on an empty graph the paged
reads never reach the engine code that crashed (issue 26). `make test` runs the time-boxed
pass (`QUICK_EXAMPLES` per operation and mode, about a minute on 2 cores); the slow one
(`EXAMPLES`) runs with `pytest -m slow tests/e2e/test_api_fuzz.py`, or `make fuzz`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    not_a_server_error,
    response_schema_conformance,
)
from schemathesis.core.failures import FailureGroup  # noqa: E402

from tests.daemon_harness import Daemon, free_port, running, uds_client  # noqa: E402

EXAMPLES = 60
QUICK_EXAMPLES = 12
SEED = [
    ("Session cache", "We use Redis 7 for the session cache; Django reaches it via django-redis."),
    ("Orders database", "The API stores orders in PostgreSQL 16; Alembic runs the migrations."),
    ("Deploys", "Deploys go through GitHub Actions to Fly.io; Sentry reports the errors."),
]


@pytest.fixture(scope="module")
def live_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("fuzz")
    daemon = Daemon(
        root / "home",
        free_port(),
        env={
            # Module fixtures start before the per-test environment isolation: be explicit.
            "MEMORYD_CONFIG": str(root / "no-config.toml"),
            "XDG_DATA_HOME": str(root / "xdg-data"),
            "XDG_CONFIG_HOME": str(root / "xdg-config"),
            "MEMORYD_GRAPH__BUFFER_POOL_MB": "128",
        },
    )
    project = root / "project"
    project.mkdir()
    with running(daemon.home, daemon.port, env=daemon.env) as process:
        with uds_client(process.home) as http:
            for title, body in SEED:
                memory = {"type": "decision", "title": title, "body": body, "scope": str(project)}
                response = http.post("/v1/memories", json=memory)
                assert response.status_code == 201, response.text
        yield process


@pytest.fixture(scope="module")
def auth(live_daemon: Daemon) -> dict[str, str]:
    return {"Authorization": f"Bearer {live_daemon.token()}"}


@schemathesis.check
def error_shape(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx/5xx body is `{"error": {"code", "message", "hint"}}` and nothing else."""
    if response.status_code < 400:
        return None
    body = response.json()
    if set(body) != {"error"} or set(body["error"]) != {"code", "message", "hint"}:
        raise AssertionError(f"error body not in the error shape: {body}")
    if not isinstance(body["error"]["code"], str) or not body["error"]["message"]:
        raise AssertionError(f"error without code or message: {body}")
    return True


def fuzz(live_daemon: Daemon, auth: dict[str, str], examples: int) -> None:
    """Every operation, valid and invalid input alike, `examples` cases per operation and
    mode (schemathesis' pytest plugin does not load under pytest 9, so the operations are
    driven with hypothesis directly). A 5xx, a death or a traceback in the log fails."""
    schema = schemathesis.openapi.from_url(
        f"http://127.0.0.1:{live_daemon.port}/openapi.json", headers=auth
    )
    checks = [not_a_server_error, error_shape, response_schema_conformance]
    failures: list[str] = []
    tested = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                case.call_and_validate(headers=auth, checks=checks)

            try:
                run()
            except Unsatisfiable:
                continue  # nothing to make invalid (an operation without parameters)
            except (Exception, FailureGroup) as exc:  # every operation is tried; listed below
                failures.append(f"{operation.label} [{mode.value}]: {exc}")
            tested += 1
            assert live_daemon.process is not None
            if live_daemon.process.poll() is not None:
                failures.append(f"the daemon died during {operation.label} [{mode.value}]")
                break
        else:
            continue
        break
    assert not failures, "\n\n".join(failures)
    assert tested >= 100
    assert "Traceback" not in live_daemon.log_text()


def test_live_api_quick_pass(live_daemon: Daemon, auth: dict[str, str]) -> None:
    """The time-boxed pass `make test` runs."""
    fuzz(live_daemon, auth, QUICK_EXAMPLES)


@pytest.mark.slow
def test_live_api_never_fails_with_5xx(live_daemon: Daemon, auth: dict[str, str]) -> None:
    fuzz(live_daemon, auth, EXAMPLES)


def test_schema_is_served(live_daemon: Daemon, auth: dict[str, str], tmp_path: Path) -> None:
    import httpx

    with httpx.Client(base_url=f"http://127.0.0.1:{live_daemon.port}", headers=auth) as http:
        paths = http.get("/openapi.json").json()["paths"]
    assert "/v1/memories" in paths
    assert "/v1/graph/cypher" in paths
