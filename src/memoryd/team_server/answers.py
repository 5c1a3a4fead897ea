"""No path of the team server's machine leaves in a team answer.

The daemon's app answers with what a local user may see: a memory's vault file, a scope's
directory, a path in an error message. On the team server those name the server's own disk
(`<home>/vault/…`, `<home>/team-projects/github.com/acme/shop`), which is none of a team
user's business. `ServerPaths` rewrites every string of an answer, HTTP and MCP alike (both
go through `TeamGuard.dispatch`), and of the page's event stream: a project's directory
becomes its key (`github.com/acme/shop`), anything else under the data dir its path inside
it (`vault/…/slug.md`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memoryd.api.asgi import Answer
from memoryd.errors import MemorydError


class ServerPaths:
    """The team server's data dir, and how its paths read in an answer."""

    def __init__(self, home: Path, projects: Path) -> None:
        def spelled(path: Path) -> list[str]:
            return sorted({str(path), str(path.resolve())}, key=len, reverse=True)

        self._rules = [(f"{root}/", "") for root in spelled(projects)]
        self._rules += [(f"{root}/", "") for root in spelled(home)]
        self._rules += [(root, ".") for root in spelled(home)]  # the data dir itself

    def text(self, value: str) -> str:
        for root, instead in self._rules:
            if root in value:
                value = value.replace(root, instead)
        return value

    def data(self, value: Any) -> Any:
        """`value` (decoded JSON) with every string rewritten, keys too."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.data(item) for item in value]
        if isinstance(value, dict):
            return {self.text(k): self.data(v) for k, v in value.items()}
        return value

    def answer(self, answer: Answer) -> Answer:
        status, headers, body = answer
        if not any(k == b"content-type" and v.startswith(b"application/json") for k, v in headers):
            return answer
        try:
            data = json.loads(body)
        except ValueError:
            return status, headers, self.text(body.decode("utf-8", "replace")).encode("utf-8")
        return status, headers, json.dumps(self.data(data)).encode("utf-8")  # sent with its length

    def error(self, exc: MemorydError) -> None:
        """Rewrite `exc`'s message and hint in place (the caller raises it again)."""
        exc.message = self.text(exc.message)
        exc.hint = self.text(exc.hint) if exc.hint else exc.hint
        exc.args = (exc.message,)

    def event(self, block: str) -> str:
        """One server-sent event with its `data:` JSON rewritten."""
        lines = []
        for line in block.split("\n"):
            if line.startswith("data: "):
                try:
                    line = "data: " + json.dumps(self.data(json.loads(line[6:])))
                except ValueError:
                    line = self.text(line)
            lines.append(line)
        return "\n".join(lines)
