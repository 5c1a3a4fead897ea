"""A team server for tests: `memoryd team init` on a FalkorDB server, users by the CLI, and
`memoryd serve --team` started, awaited until it answers over TLS, stopped and started again
on the same port (the developer daemons that joined it keep its URL)."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from tests.daemon_harness import free_port
from tests.pins import PINNED_ENV
from tests.waiting import wait_until

START_S = 300.0
"""A loaded machine (8 helpers on 2 cores) took minutes to start a server: wait, not fail."""


@dataclass
class Team:
    home: Path
    url: str
    cert: Path
    tokens: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)
    memoryd: list[str] = field(default_factory=lambda: [sys.executable, "-m", "memoryd"])
    """How `cli` runs a command (`tests.cli_forks.forked_commands`' shim forks it instead)."""

    @classmethod
    def init(
        cls, home: Path, falkordb_url: str, graph: str, memoryd: list[str] | None = None
    ) -> Team:
        team = cls(home, "", home / "tls" / "cert.pem", {})
        if memoryd is not None:
            team.memoryd = memoryd
        team.cli("init", "--port", str(free_port()), "--falkordb-url", falkordb_url,
                 "--graph-name", graph)  # fmt: skip
        return team

    def client(self, user: str | None) -> httpx.Client:
        headers = {} if user is None else {"Authorization": f"Bearer {self.tokens[user]}"}
        context = ssl.create_default_context(cafile=str(self.cert))
        return httpx.Client(base_url=self.url, headers=headers, verify=context, timeout=60)

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [*self.memoryd, "team", *args, "--home", str(self.home)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**PINNED_ENV, **os.environ},
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def add_user(self, name: str) -> str:
        self.tokens[name] = self.cli("user", "add", name).strip()
        return self.tokens[name]

    def start(self) -> Team:
        """`memoryd serve --team` (the issue's name; `team serve` is the same command)."""
        self.log = (self.home.parent / "server.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--team", "--home", str(self.home)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**PINNED_ENV, **os.environ},
        )
        self.url = self.wait_ready()
        return self

    def wait_ready(self) -> str:
        """The server's URL once it answers a request over TLS (a 401 to a request without a
        token), not once a file appears: on a loaded machine the first request used to wait
        behind the server's start-up and time out. Fails at once if the server died."""
        listen = self.home / "team-listen.json"
        context = ssl.create_default_context(cafile=str(self.cert))
        process = self.process
        assert process is not None

        def answered() -> str | None:
            assert process.poll() is None, (self.home.parent / "server.log").read_text()
            if not listen.exists():
                return None
            url = f"https://127.0.0.1:{json.loads(listen.read_text())['port']}"
            try:
                answer = httpx.get(f"{url}/v1/recall", verify=context, timeout=10)
            except httpx.TransportError:
                return None
            return url if answer.status_code == 401 else None

        url = wait_until(answered, what="the team server to answer", timeout_s=START_S, every_s=0.2)
        assert url is not None
        return url

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.log is not None:
            self.log.close()
            self.log = None
