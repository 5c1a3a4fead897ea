"""`SearchDoc`: one memory as the search index holds it. Its own module so that the session
view (`search.sessions`) and the index, which uses the view, both read it from below."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from memoryd.models import DecayState, MemoryType


class SearchDoc(BaseModel):
    """What the index holds of one memory: what it searches, filters on and shows in a hit."""

    model_config = ConfigDict(frozen=True)

    slug: str = Field(min_length=1)
    scope_hash: str
    type: MemoryType
    decay_state: DecayState
    title: str
    body: str
    tags: list[str] = Field(default_factory=list)
    triggers: list[str] = Field(default_factory=list)
    created_at: datetime
    withheld: bool = False
    """A sensitive memory: the on-disk index holds nothing of it, so `upsert` removes its
    slug instead of indexing it (an in-memory index under a grant indexes it as any other)."""
