"""`create_app(service)`: the HTTP API over one open MemoryService (OpenAPI at /docs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from memoryd import __version__
from memoryd.api import digest, errors, facts, grants, page, supersedes, sync
from memoryd.api.maintenance import router as maintenance_router
from memoryd.api.profile import router as profile_router
from memoryd.api.reports import router as reports_router
from memoryd.api.review import router as review_router
from memoryd.api.routes import Backend, router
from memoryd.api.runner import ServiceRunner
from memoryd.api.security import STATIC_DIR
from memoryd.api.sensitive import router as sensitive_router
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
    app.include_router(review_router)
    app.include_router(supersedes.router)
    app.include_router(maintenance_router)
    app.include_router(grants.router)
    app.include_router(facts.router)
    app.include_router(sensitive_router)
    app.include_router(reports_router)
    app.include_router(digest.router)
    app.include_router(profile_router)
    app.include_router(sync.router)
    app.include_router(page.router)
    install_page(app)
    return app


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
