"""`create_app(service)`: the HTTP API over one open MemoryService (OpenAPI at /docs)."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from memoryd import __version__
from memoryd.api import errors
from memoryd.api.routes import Backend, router
from memoryd.api.runner import ServiceRunner
from memoryd.api.security import STATIC_DIR
from memoryd.config import Settings
from memoryd.models import DoctorCheck
from memoryd.service import MemoryService

DESCRIPTION = """\
The memoryd daemon's API. On the Unix socket `<home>/memoryd.sock` no token is needed; on
`127.0.0.1:<port>` send `Authorization: Bearer <token>` (`memoryd token` prints it). Every
error has the shape `{"error": {"code", "message", "hint"}}`; lists are paginated with
`limit`/`offset` and give the `next_offset` to ask for (null on the last page).

`/` is a page to browse the graph (`memoryd ui` opens it with the token in its URL fragment);
`/docs` is this description in Swagger UI (`memoryd ui --docs`), served from the package.
`GET /v1/events` (not listed here: a stream) sends server-sent events, one per new or changed
memory, from the audit log; resume with `Last-Event-ID` or `?after=SEQ`. A write carrying an
`Origin` header must come from the daemon's own origin.
"""
# The page runs only its own scripts and talks only to this origin; nobody may frame it.
# Inline styles are allowed because cytoscape sets its container's style attribute.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self';"
    " style-src 'self' 'unsafe-inline';"
    " img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none';"
    " frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
# Swagger UI draws its icons as data: SVGs and sets style attributes; it runs no inline script
# (docs.js starts it), and its requests go to this origin only.
DOCS_HEADERS = PAGE_HEADERS


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
        # FastAPI's own /docs and /redoc load their scripts from a CDN; install_page serves
        # Swagger UI from the package instead.
        docs_url=None,
        redoc_url=None,
    )

    def checks() -> list[DoctorCheck]:
        from memoryd.config import load_settings
        from memoryd.doctor import run_checks

        return run_checks(settings or load_settings(service.home), service)

    app.state.backend = Backend(service=service, runner=active, checks=checks, tcp_port=tcp_port)
    app.state.settings = settings
    errors.install(app)
    app.include_router(router)
    include_later(app, LATER_ROUTERS)
    install_page(app)
    return app


LATER_ROUTERS = (
    "review",
    "supersedes",
    "maintenance",
    "grants",
    "facts",
    "sensitive",
    "reports",
    "digest",
    "profile",
    "sync",
    "page",
)
"""The `memoryd.api` modules whose routes are built on the first request that the routes
built so far do not answer, or for the first OpenAPI document. Building a route builds the
schemas of its parameters and answer, most of the daemon's start before its first request;
recall, record and the memories' reads (`routes`) are built at once."""


def include_later(app: FastAPI, modules: Sequence[str]) -> None:
    """Include each module's `router` in `app` when a request finds no route (then the
    request is matched again) or the OpenAPI document is asked for. No route of these may
    share a path with one built at once: that route would answer 405 in its place
    (tests/integration/test_api_lazy_routes.py checks it)."""
    pending = list(modules)
    not_found = app.router.default
    openapi = app.openapi

    def include() -> None:
        while pending:  # on the event loop's thread: no request is matched meanwhile
            app.include_router(importlib.import_module(f"memoryd.api.{pending[0]}").router)
            pending.pop(0)
        app.router.default = not_found

    async def unmatched(scope: Scope, receive: Receive, send: Send) -> None:
        if not pending:
            await not_found(scope, receive, send)
            return
        include()
        await app.router.app(scope, receive, send)

    def full_openapi() -> dict[str, Any]:
        include()
        return openapi()

    app.router.default = unmatched
    app.openapi = full_openapi  # type: ignore[method-assign]


def install_page(app: FastAPI) -> None:
    """The graph page and the API docs: `/` is index.html, `/docs` is docs.html (Swagger UI);
    their scripts, styles and vendored libraries are under `/static`. Static files only;
    every piece of data, the OpenAPI document included, comes with the token."""

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)

    @app.api_route("/docs", methods=["GET", "HEAD"], include_in_schema=False)
    async def docs() -> FileResponse:
        return FileResponse(STATIC_DIR / "docs.html", headers=DOCS_HEADERS)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
