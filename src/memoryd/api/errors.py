"""The HTTP face of the error tree: one status per MemorydError class, one error shape.

Every error the API returns, from a handler, a validation failure, an unknown route or the
host/token guard, has the body `{"error": {"code", "message", "hint"}}`; `code` is the
MemorydError code, so a client can turn it back into the same exception class
(`memoryd.client` does) and the CLI exits with the same code through the daemon as
without it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from memoryd.errors import (
    AuditChainBroken,
    BrokenMemoryFile,
    ConfigError,
    Conflict,
    ExtractionFailed,
    GraphLocked,
    InvalidInput,
    MemorydError,
    NotFound,
    PolicyDenied,
    QueryLimitExceeded,
    RateLimited,
    ResourceExhausted,
    StorageError,
    TokenRefused,
    describe_validation,
)

logger = logging.getLogger(__name__)

# Most specific first: the first class an error is an instance of decides its status.
STATUS: list[tuple[type[MemorydError], int]] = [
    (BrokenMemoryFile, 500),  # a vault file edited by hand: not the request's fault
    (InvalidInput, 422),
    (NotFound, 404),
    (Conflict, 409),
    (QueryLimitExceeded, 422),  # the query asked too much: narrow it
    (TokenRefused, 401),  # a team server's token: unknown, revoked or expired
    (PolicyDenied, 403),
    (RateLimited, 503),  # the LLM provider's limit, not ours: retry later
    (ExtractionFailed, 502),
    (GraphLocked, 503),
    (ResourceExhausted, 507),
    (AuditChainBroken, 500),
    (StorageError, 503),
    (ConfigError, 500),
]
STORAGE_HINT = "the daemon's storage failed; see <home>/logs/daemon.log, then retry"
_HTTP_CODES = {
    401: "unauthorized",
    403: "policy_denied",
    404: "not_found",
    405: "method_not_allowed",
    413: "invalid_input",
    415: "invalid_input",
    422: "invalid_input",
}


class ErrorDetail(BaseModel):
    code: str
    message: str
    hint: str = ""


class ErrorBody(BaseModel):
    """The shape of every error response."""

    error: ErrorDetail


def status_of(exc: MemorydError) -> int:
    return next((status for cls, status in STATUS if isinstance(exc, cls)), 500)


def error_body(code: str, message: str, hint: str = "") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "hint": hint}}


def error_response(
    status: int, code: str, message: str, hint: str = "", headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message, hint), status_code=status, headers=headers)


async def memoryd_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MemorydError)
    status = status_of(exc)
    hint = exc.hint
    if status >= 500:
        logger.error("%s %s failed: %s (%s)", request.method, request.url.path, exc, exc.code)
        if not hint and isinstance(exc, StorageError):
            hint = STORAGE_HINT
    headers = {"Retry-After": "1"} if status == 503 else None
    return error_response(status, exc.code, exc.message, hint, headers)


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(
        422,
        InvalidInput.code,
        "invalid request: " + describe_validation(exc.errors()),
        "see the OpenAPI description at /docs",
    )


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}"
        hint = "the API lives under /v1; see /docs"
    else:
        hint = ""
    return error_response(exc.status_code, code, message, hint, exc.headers)


async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.error("%s %s failed unexpectedly", request.method, request.url.path, exc_info=exc)
    return error_response(
        500,
        "internal_error",
        f"unexpected {type(exc).__name__}: {exc}",
        "this is a bug in memoryd; the daemon log has the traceback",
    )


def install(app: FastAPI) -> None:
    """Register the handlers: every error leaves the API in the one shape."""
    app.add_exception_handler(MemorydError, memoryd_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)
