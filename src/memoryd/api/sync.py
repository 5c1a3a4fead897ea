"""The `/v1/sync` routes: memories.json export, import, diff, and the conflicts an import left.

Files are named by absolute paths on the daemon's machine (the CLI resolves them where it
runs). A passphrase (sealing or opening sensitive memories) travels only over the daemon's
own socket, like every sync route (`api.security.SOCKET_ONLY`), and is never logged.
Export and import run on the writer thread like every other write: an import writes
memories, and an export flushes recall counts into the files it reads and records the sync
base; a diff and the conflicts list are reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from pydantic import BaseModel, Field, field_validator

from memoryd.api.routes import ERRORS, Actor, Api
from memoryd.api.schemas import PathText
from memoryd.sync.models import (
    ConflictEntry,
    ConflictStrategy,
    ExportReport,
    ImportReport,
    ResolveResult,
    SyncDiff,
)

router = APIRouter(
    prefix="/v1/sync",
    tags=["sync"],
    responses=ERRORS,
    generate_unique_id_function=lambda route: route.name,
)


def _absolute(value: str) -> str:
    if not Path(value).is_absolute():
        raise ValueError(f"{value!r} must be an absolute path (the daemon has its own cwd)")
    return value


class ExportRequest(BaseModel):
    out: PathText = Field(description="absolute path of the memories.json to write")
    scope: str | None = Field(default=None, pattern=r"^[0-9a-f]{12}$")
    include_audit_chain: bool = False
    include_embeddings: bool = False
    chunk_size_mb: float = Field(default=5.0, gt=0)
    passphrase: str | None = Field(
        default=None, min_length=1, repr=False, description="seals the sensitive memories"
    )

    _out = field_validator("out")(_absolute)


class ImportRequest(BaseModel):
    source: PathText = Field(description="absolute path of the memories.json to read")
    conflict: ConflictStrategy = "merge"
    dry_run: bool = False
    map_scope: dict[PathText, PathText] = Field(default_factory=dict)
    scope: PathText | None = Field(
        default=None, description="absolute project path for memories that carry no scope"
    )
    passphrase: str | None = Field(
        default=None, min_length=1, repr=False, description="opens the sealed memories"
    )

    _source = field_validator("source")(_absolute)


class DiffRequest(BaseModel):
    source: PathText
    map_scope: dict[PathText, PathText] = Field(default_factory=dict)
    scope: PathText | None = None

    _source = field_validator("source")(_absolute)


class ResolveRequest(BaseModel):
    take: str = Field(description="`local`, `remote`, or the absolute path of a file")


@router.post("/export")
async def sync_export(api: Api, body: ExportRequest, actor: Actor = "api") -> ExportReport:
    """Write memories.json: the same state gives the same bytes; sensitive memories are
    never in it."""
    return await api.write(
        actor,
        api.service.sync_export,
        Path(body.out),
        scope=body.scope,
        include_audit_chain=body.include_audit_chain,
        include_embeddings=body.include_embeddings,
        chunk_size_mb=body.chunk_size_mb,
        passphrase=body.passphrase,
    )


@router.post("/import")
async def sync_import(api: Api, body: ImportRequest, actor: Actor = "api") -> ImportReport:
    """Import memories.json or an mcp-memory-service export; with `dry_run`, what it would do."""
    return await api.write(
        actor,
        api.service.sync_import,
        Path(body.source),
        conflict=body.conflict,
        dry_run=body.dry_run,
        map_scope=body.map_scope,
        scope=body.scope,
        passphrase=body.passphrase,
    )


@router.post("/diff")
async def sync_diff(api: Api, body: DiffRequest) -> SyncDiff:
    """The file against this data dir: added, removed and changed memories."""
    return await api.runner.read(
        api.service.sync_diff, Path(body.source), map_scope=body.map_scope, scope=body.scope
    )


@router.get("/conflicts")
async def sync_conflicts(api: Api) -> list[ConflictEntry]:
    """Body conflicts waiting in `_conflicts/`."""
    return await api.runner.read(api.service.sync_conflicts)


@router.post("/conflicts/{slug}/resolve")
async def sync_resolve(
    api: Api,
    slug: Annotated[str, PathParam(description="the memory's slug")],
    body: ResolveRequest,
    actor: Actor = "api",
) -> ResolveResult:
    """Close a conflict: keep the local body, take the remote one, or a file's."""
    return await api.write(actor, api.service.sync_resolve, slug, body.take)
