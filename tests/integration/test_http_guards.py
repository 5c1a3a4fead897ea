"""The daemon's HTTP guards on a real uvicorn (a daemon process on 127.0.0.1): request bodies
are limited while they stream in, whatever their framing, and the bearer scheme is matched the
way RFC 9110 says (case-insensitively); `/docs` comes from the package; `memoryd token --json`
gives the token."""

from __future__ import annotations

import json
import socket
import stat
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from typer.testing import CliRunner

from memoryd.api.security import MAX_BODY_BYTES
from memoryd.cli.main import app
from tests.daemon_harness import Daemon, free_port, running, tcp_client, uds_client

MIB = 1024 * 1024
UPLOAD_BYTES = 160 * MIB  # ten times the limit
cli = CliRunner()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("http-guards")
    env = {
        "MEMORYD_CONFIG": str(root / "no-config.toml"),
        "MEMORYD_GRAPH__BUFFER_POOL_MB": "128",
        "MEMORYD_DAEMON__RECALL_READERS": "0",
        "XDG_DATA_HOME": str(root / "xdg-data"),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
    }
    with running(root / "home", free_port(), env=env) as process:
        yield process


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


class Upload:
    """A request body of `total` bytes in 1 MiB pieces that counts what was taken from it."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        piece = b"x" * MIB
        while self.sent < self.total:
            self.sent += len(piece)
            yield piece


def assert_too_large(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert f"the limit is {MAX_BODY_BYTES} bytes" in error["message"]
    assert "split larger texts" in error["hint"]
    assert response.headers["connection"] == "close"


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_an_oversized_body_is_refused_while_it_streams(daemon: Daemon, framing: str) -> None:
    """413 once the limit is passed, before the client has sent the rest, and the daemon did
    not hold the body: its peak RSS grows by far less than the upload."""
    before = peak_rss_mb(daemon.pid)
    upload = Upload(UPLOAD_BYTES)
    headers = {"Content-Type": "application/json"}
    if framing == "content-length":
        headers["Content-Length"] = str(UPLOAD_BYTES)
    with tcp_client(daemon.port or 0, daemon.token(), timeout=120) as http:
        response = http.post("/v1/memories", content=upload, headers=headers)
        if framing == "chunked":
            assert response.request.headers["transfer-encoding"] == "chunked"
        assert_too_large(response)
        assert upload.sent < UPLOAD_BYTES / 2, f"the client sent {upload.sent / MIB:.0f} MiB"
        grown = peak_rss_mb(daemon.pid) - before
        assert grown < 3 * MAX_BODY_BYTES / MIB, f"the daemon grew by {grown:.0f} MiB"
        assert http.get("/v1/health").status_code == 200  # and it keeps serving


def test_a_chunked_body_within_the_limit_is_accepted(daemon: Daemon, tmp_path: Path) -> None:
    memory = {"type": "fact", "title": "Chunked", "body": "y" * 900_000, "scope": str(tmp_path)}
    data = json.dumps(memory).encode()

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(data), 64 * 1024):
            yield data[start : start + 64 * 1024]

    with tcp_client(daemon.port or 0, daemon.token(), timeout=120) as http:
        response = http.post(
            "/v1/memories", content=pieces(), headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 201, response.text
    assert response.json()["meta"]["title"] == "Chunked"


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR", "Bearer "])
def test_the_bearer_scheme_is_case_insensitive(daemon: Daemon, scheme: str) -> None:
    """RFC 9110 11.1: the scheme is case-insensitive, and one or more spaces follow it."""
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=30) as http:
        good = http.get("/v1/health", headers={"Authorization": f"{scheme} {daemon.token()}"})
        assert good.status_code == 200, good.text
        wrong = http.get("/v1/health", headers={"Authorization": f"{scheme} not-the-token"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["message"] == "wrong bearer token"


@pytest.mark.parametrize(
    "value",
    ["Basic {token}", "Bearer", "Bearer{token}", "{token}", "Bearer {token} extra", "Bearer x", ""],
)
def test_other_authorization_values_are_refused(daemon: Daemon, value: str) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=30) as http:
        response = http.get(
            "/v1/health", headers={"Authorization": value.format(token=daemon.token())}
        )
    assert response.status_code == 401, value
    assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("good_first", [False, True])
def test_two_authorization_headers_are_refused(daemon: Daemon, good_first: bool) -> None:
    """Issue 26: with the bad one first, the second (good) one was taken and the request
    served. Which one a proxy or a framework reads differs, so neither is: 401."""
    good, bad = f"Bearer {daemon.token()}", "Bearer not-the-token"
    pair = [good, bad] if good_first else [bad, good]
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=30) as http:
        response = http.get("/v1/health", headers=[("Authorization", v) for v in pair])
        same = http.get("/v1/health", headers=[("Authorization", good), ("Authorization", good)])
    for answer in (response, same):
        assert answer.status_code == 401, answer.text
        error = answer.json()["error"]
        assert error["code"] == "unauthorized"
        assert error["message"] == "2 Authorization headers; send exactly one"


def test_two_host_headers_are_refused(daemon: Daemon) -> None:
    """RFC 9112 3.2: a request with more than one Host header is answered 400."""
    request = (
        "GET /v1/health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n"
        f"Authorization: Bearer {daemon.token()}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", daemon.port or 0), timeout=30) as sock:
        sock.sendall(request.encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"Host header" in answer, answer


def test_sync_routes_name_files_and_are_served_on_the_socket_only(
    daemon: Daemon, tmp_path: Path
) -> None:
    """A TCP client holding the token still cannot make the daemon write or read a path it
    chooses; the CLI, on the socket, can."""
    target = tmp_path / "stolen.json"
    assert daemon.port is not None
    with tcp_client(daemon.port, daemon.token()) as http:
        refused = http.post("/v1/sync/export", json={"out": str(target)})
        read = http.post("/v1/sync/diff", json={"source": "/etc/passwd"})
    for response in (refused, read):
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "policy_denied"
        assert "Unix socket only" in response.json()["error"]["message"]
    assert not target.exists()
    with uds_client(daemon.home) as local:
        exported = local.post("/v1/sync/export", json={"out": str(target)})
    assert exported.status_code == 200, exported.text
    assert target.is_file()


def test_token_json_gives_the_token_the_daemon_accepts(daemon: Daemon) -> None:
    """`memoryd token --json`: one JSON object, like every `--json`; the plain form is the
    bare token, and both are the one the running daemon checks."""
    home = ["--home", str(daemon.home)]
    result = cli.invoke(app, ["token", "--json", *home])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == {"token": daemon.token(), "path": str(daemon.home / "token")}
    assert stat.S_IMODE(Path(data["path"]).stat().st_mode) == 0o600
    plain = cli.invoke(app, ["token", *home])
    assert plain.stdout == data["token"] + "\n"
    with tcp_client(daemon.port or 0, data["token"]) as http:
        assert http.get("/v1/health").status_code == 200


def test_token_json_creates_the_token_in_a_new_home(tmp_path: Path) -> None:
    home = tmp_path / "new-home"
    result = cli.invoke(app, ["token", "--json", "--home", str(home)])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["token"]) >= 32
    assert (home / "token").read_text().strip() == data["token"]


class Links(HTMLParser):
    """Every src and href in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def test_docs_are_served_from_the_package(daemon: Daemon) -> None:
    """/docs needs no token (a browser cannot send one when it navigates) and holds no data;
    its scripts and styles come from this daemon, not a CDN; the OpenAPI document still needs
    the token."""
    base = f"http://127.0.0.1:{daemon.port}"
    with httpx.Client(base_url=base, timeout=30) as http:
        page = http.get("/docs")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self';" in page.headers["content-security-policy"]
        links = Links()
        links.feed(page.text)
        assert "/static/vendor/swagger-ui-bundle.js" in links.urls
        assert "/static/vendor/swagger-ui.css" in links.urls
        assert "/static/docs.js" in links.urls
        for url in links.urls:
            assert not urlsplit(url).netloc, f"{url} is on another host"
            assert url.startswith("/"), url
            assert http.get(url).status_code == 200, url  # the assets need no token either
        assert "<script>" not in page.text  # no inline script: the CSP allows none
        for private in ("/openapi.json", "/redoc"):
            assert http.get(private).status_code == 401, private
        good = {"Authorization": f"Bearer {daemon.token()}"}
        assert "/v1/health" in http.get("/openapi.json", headers=good).json()["paths"]
        assert http.get("/redoc", headers=good).status_code == 404  # FastAPI's CDN page is off
