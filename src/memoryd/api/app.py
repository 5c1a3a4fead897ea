"""`create_app(service)`: the HTTP API over one open MemoryService (OpenAPI at /docs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from memoryd import __version__
from memoryd.api import errors
from memoryd.api.routes import Backend, router
from memoryd.config import Settings
from memoryd.daemon.writer import ServiceRunner
from memoryd.service import MemoryService

DESCRIPTION = """\
The memoryd daemon's API. On the Unix socket `<home>/memoryd.sock` no token is needed; on
`127.0.0.1:<port>` send `Authorization: Bearer <token>` (`memoryd token` prints it). Every
error has the shape `{"error": {"code", "message", "hint"}}`; lists are paginated with
`limit`/`offset` and give the `next_offset` to ask for (null on the last page).
"""


def create_app(
    service: MemoryService,
    runner: ServiceRunner | None = None,
    *,
    settings: Settings | None = None,
    tcp_port: int | None = None,
) -> FastAPI:
    """The app; the caller owns the service. A runner made here is closed on app shutdown."""
    owned = runner is None
    active = runner if runner is not None else ServiceRunner()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if owned:
            active.close()

    app = FastAPI(
        title="memoryd",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.backend = Backend(service=service, runner=active, tcp_port=tcp_port)
    app.state.settings = settings
    errors.install(app)
    app.include_router(router)
    return app
