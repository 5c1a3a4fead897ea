"""The sensitive-scope routes: mark, unmark, status, rotate-key.

Marking and unmarking rebuild the graph and the index (no page may keep the old text), so they
run exclusively, like reindex; a passphrase travels only over the daemon's own socket or its
token-guarded loopback port and is never logged."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from memoryd.api.ports import ServedService
from memoryd.api.routes import ERRORS, Actor, Api
from memoryd.api.schemas import PathText
from memoryd.capture.hook import replayer
from memoryd.capture.sealing import replay_failed
from memoryd.capture_limits import load_capture_config
from memoryd.domain.sensitivity import (
    MarkReport,
    RotateReport,
    SealedRetryReport,
    SensitiveStatus,
    UnmarkReport,
)

router = APIRouter(
    prefix="/v1/sensitive",
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
    tags=["sensitive"],
)


class ScopeKeyRequest(BaseModel):
    path: PathText = Field(min_length=1, description="a directory of the project (absolute)")
    passphrase: str | None = Field(default=None, min_length=1, repr=False)


class UnmarkRequest(BaseModel):
    path: PathText = Field(min_length=1)
    yes: bool = False


@router.post("/mark")
async def mark_sensitive(api: Api, body: ScopeKeyRequest, actor: Actor = "api") -> MarkReport:
    """Mark a scope sensitive and encrypt every memory it holds."""
    return await api.exclusive(
        actor, api.service.sensitive_mark, body.path, passphrase=body.passphrase
    )


@router.post("/unmark")
async def unmark_sensitive(api: Api, body: UnmarkRequest, actor: Actor = "api") -> UnmarkReport:
    """Decrypt a sensitive scope back to plaintext; 422 without `yes`, 403 without a grant."""
    return await api.exclusive(actor, api.service.sensitive_unmark, body.path, yes=body.yes)


@router.post("/rotate-key")
async def rotate_key(api: Api, body: ScopeKeyRequest, actor: Actor = "api") -> RotateReport:
    """Re-encrypt a sensitive scope under a new key."""
    return await api.write(
        actor, api.service.sensitive_rotate_key, body.path, passphrase=body.passphrase
    )


@router.get("")
async def sensitive_status(api: Api) -> list[SensitiveStatus]:
    """Every sensitive scope: its key and whether this machine has it, its files."""
    found: list[SensitiveStatus] = await api.runner.read(api.service.sensitive_status)
    return found


def _replay_sealed(service: ServedService) -> SealedRetryReport:
    config = load_capture_config(str(service.home))
    done = replay_failed(service.home, service.open_failed_capture, replayer(config))
    return SealedRetryReport(processed=done.processed, failing=done.failing, errors=done.errors)


@router.post("/retry-captures")
async def retry_sealed_captures(api: Api) -> SealedRetryReport:
    """Replay the sealed payloads a capture kept in `inbox/failed/` (`memoryd capture retry`):
    they are opened here, where the scope key is, and captured again (sealed, as the hook
    does); a file that still fails stays, and `errors` says why (a missing key names
    `memoryd sensitive import-key`)."""
    report: SealedRetryReport = await api.runner.read(_replay_sealed, api.service)
    return report
