"""How a command reaches memoryd: the daemon's client or the stores opened in-process, with
every MemorydError turned into one line and an exit code (`output.fail`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from memoryd.cli.output import err, fail
from memoryd.errors import MemorydError

if TYPE_CHECKING:
    from memoryd.config import Settings
    from memoryd.protocol import MemoryAPI

T = TypeVar("T")
Service: TypeAlias = "MemoryAPI"


def load_settings(home: Path | None) -> Settings:
    """`memoryd.config.load_settings`, imported when a command runs: pydantic-settings is
    start-up time that `--help` and the commands which need no settings should not pay."""
    from memoryd.config import load_settings as load

    return load(home)


@contextmanager
def service(home: Path | None, *, rebuild: bool = False, writes: bool = False) -> Iterator[Service]:
    """The service for one command: the daemon's client when a daemon serves the data dir
    (it owns the graph), else the stores opened in-process. Every MemorydError becomes one
    line and an exit code, the same in both modes.

    A command that `writes` first indexes the captures waiting in the inbox (in-process, with
    their spaCy rules; the LLM work is left to a daemon). A read does no hidden work: it only
    says on stderr when captures wait, so a `get` stays fast."""
    from memoryd.client.connect import captures_waiting, index_captures, open_service_or_client

    try:
        settings = load_settings(home)
        with open_service_or_client(settings, rebuild=rebuild) as svc:
            if writes:
                index_captures(svc)
            elif waiting := captures_waiting(svc, settings.home):
                err.print(
                    f"{waiting} capture{'s' if waiting > 1 else ''} waiting; run memoryd serve"
                    " or memoryd capture retry",
                    markup=False,
                )
            yield svc
    except MemorydError as exc:
        raise fail(exc) from exc


def run(home: Path | None, action: Callable[[Service], T], *, writes: bool = False) -> T:
    with service(home, writes=writes) as svc:
        return action(svc)
