"""The sensitive-scope routes: mark, unmark, status, rotate-key.

Marking and unmarking rebuild the graph and the index (no page may keep the old text), so they
run exclusively, like reindex; a passphrase travels only over the daemon's own socket or its
token-guarded loopback port and is never logged."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from memoryd.api.routes import ERRORS, Actor, Api
from memoryd.domain.sensitivity import MarkReport, RotateReport, SensitiveStatus, UnmarkReport

router = APIRouter(
    prefix="/v1/sensitive",
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
    tags=["sensitive"],
)


class ScopeKeyRequest(BaseModel):
    path: str = Field(min_length=1, description="a directory of the project (absolute)")
    passphrase: str | None = Field(default=None, min_length=1, repr=False)


class UnmarkRequest(BaseModel):
    path: str = Field(min_length=1)
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
