"""What the sync commands report: plain data the CLI, the HTTP API and the daemon's client
exchange (`memoryd sync export|import|diff-with-remote|conflicts|resolve`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from memoryd.models import Timestamp

ConflictStrategy = Literal["merge", "prefer-local", "prefer-remote"]
MappedBy = Literal["same hash", "git remote", "--map-scope", "new", "--scope"]


class ExportReport(BaseModel):
    """What `sync export` wrote."""

    path: str
    sha256: str
    bytes: int
    memories: int
    entities: int
    relations: int
    supersedes: int
    audit_lines: int
    chunks: list[str] = Field(default_factory=list)
    """The chunk files written beside the export (`FILE.chunks/<sha>.bin`)."""
    omitted_sensitive: int = 0
    """Sensitive memories left out: no plaintext of them leaves memoryd."""
    omitted_reason: str | None = None
    """Why they were left out (no passphrase given, or files that do not open)."""
    encrypted: int = 0
    """Sensitive memories sealed into the `encryption` block (passphrase mode)."""
    identity_snapshot: bool = False


class ScopeMapping(BaseModel):
    """Which local scope a scope of the file lands in, and why."""

    remote: str
    local: str
    how: MappedBy
    remote_path: str | None = None
    local_path: str | None = None


class FieldChange(BaseModel):
    """One field of one memory that an import changes, and which side it came from."""

    field: str
    took: Literal["local", "remote", "union", "max", "conflict"]


class MemoryChange(BaseModel):
    slug: str
    fields: list[FieldChange]


class SkippedMemory(BaseModel):
    slug: str
    reason: str


class ConflictEntry(BaseModel):
    """A body both sides changed: the local memory stays, the remote one waits in
    `_conflicts/<slug>.<source>.md` until `sync resolve`."""

    slug: str
    source: str
    path: str
    local_updated_at: Timestamp | None = None
    remote_updated_at: Timestamp | None = None


class ImportReport(BaseModel):
    """What `sync import` did, or, with `dry_run`, exactly what it would do."""

    source_machine: str
    exporter_version: str
    remote_chain_head: str | None = None
    strategy: ConflictStrategy
    dry_run: bool
    scope_mappings: list[ScopeMapping] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    updated: list[MemoryChange] = Field(default_factory=list)
    unchanged: int = 0
    conflicts: list[ConflictEntry] = Field(default_factory=list)
    skipped: list[SkippedMemory] = Field(default_factory=list)
    aliases_added: list[str] = Field(default_factory=list)
    """`entity id = alias` for each alias taught to the local graph."""
    entities_merged: list[str] = Field(default_factory=list)
    """`kept id <- dropped id` for each merge the remote made that this graph had not."""
    audit_events_imported: int = 0
    identity_snapshot: Literal["absent", "same", "written", "conflict"] = "absent"
    encrypted: int = 0
    """Sealed (sensitive) memories of the file, opened with the passphrase and sealed again
    under the local scope key."""
    scopes_marked: list[str] = Field(default_factory=list)
    """Local scopes this import made sensitive (a key made here) to receive sealed memories."""
    embeddings_carried: int = 0
    """Memories whose carried vectors were stored as they are (same model, same text)."""
    embeddings_to_compute: int = 0
    """Memories whose carried vectors do not fit here (another model, or the text merged
    differently): the embedding worker makes theirs."""
    superseded: int = 0
    """Older memories here that the added ones supersede, judged as a `record_many` judges
    (status lines, then the rules in `created_at` order); 0 for a dry run."""


class ChangedMemory(BaseModel):
    slug: str
    fields: list[str]


class SyncDiff(BaseModel):
    """`sync diff-with-remote`: the remote file against this data dir."""

    added: list[str] = Field(default_factory=list)
    """In the file, not here."""
    removed: list[str] = Field(default_factory=list)
    """Here (in the scopes the file covers), not in the file."""
    changed: list[ChangedMemory] = Field(default_factory=list)
    scope_mappings: list[ScopeMapping] = Field(default_factory=list)
    sealed_not_compared: int = 0
    """The file's sealed (sensitive) memories: only an import with the passphrase opens and
    compares them, so they are in none of the lists above (this data dir's sensitive
    memories are not read for a diff either, so never listed as removed)."""


class ResolveResult(BaseModel):
    slug: str
    took: str
    removed: list[str] = Field(default_factory=list)
    """The conflict files closed."""
