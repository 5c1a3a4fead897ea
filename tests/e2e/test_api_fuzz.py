"""schemathesis against the live OpenAPI of a real daemon: no 5xx, every error in one shape.

Slow (a few minutes): `pytest -m slow tests/e2e/test_api_fuzz.py`, or `make fuzz`.
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

from tests.daemon_harness import Daemon, free_port, running  # noqa: E402

pytestmark = pytest.mark.slow
EXAMPLES = 60


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
    with running(daemon.home, daemon.port, env=daemon.env) as process:
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


def test_live_api_never_fails_with_5xx(live_daemon: Daemon, auth: dict[str, str]) -> None:
    """Every operation, valid and invalid input alike (schemathesis' pytest plugin does not
    load under pytest 9, so the operations are driven with hypothesis directly)."""
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
                max_examples=EXAMPLES,
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
    assert tested >= 15
    assert not failures, "\n\n".join(failures)
    assert "Traceback" not in live_daemon.log_text()


def test_schema_is_served(live_daemon: Daemon, auth: dict[str, str], tmp_path: Path) -> None:
    import httpx

    with httpx.Client(base_url=f"http://127.0.0.1:{live_daemon.port}", headers=auth) as http:
        paths = http.get("/openapi.json").json()["paths"]
    assert "/v1/memories" in paths
    assert "/v1/graph/cypher" in paths
