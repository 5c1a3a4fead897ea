"""What the api package needs from the process that serves it, as Protocols it owns.

The daemon (`memoryd.daemon.server`) builds the app and hands it objects that satisfy these;
the api package never imports the daemon, so the dependency points one way only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memoryd.protocol import MemoryAPI

if TYPE_CHECKING:
    from memoryd.audit import AuditLog
    from memoryd.errors import MemorydError
    from memoryd.governance.analyze import AnalysisJob, AnalysisMode
    from memoryd.governance.gate import Gate
    from memoryd.governance.profile import ProfileJob, ProfileRewrite
    from memoryd.governance.supersede import SupersedeJob
    from memoryd.graph.store import GraphStore
    from memoryd.llm.base import LLMProvider
    from memoryd.models import (
        DuraAnalysis,
        PromotionProposal,
        RecallResult,
        SupersedeDecision,
    )
    from memoryd.search.index import SearchIndex


class ServedService(MemoryAPI, Protocol):
    """The service the routes call: `MemoryAPI`, plus what only the process that holds the
    stores can do (pages of the graph's and the audit log's own reads, counting recalls on
    the writer) and the actor name writes are audited under."""

    actor: str
    home: Path
    graph: GraphStore
    index: SearchIndex
    """The search index (health reports the documents waiting for its commit)."""
    audit: AuditLog
    gate: Gate
    """The sensitive-scope gate (the graph page counts what it hides)."""

    llm: LLMProvider | None
    """The configured LLM (DURA scoring runs it off the writer thread)."""

    def open_failed_capture(self, path: Path) -> bytes:
        """The plaintext of a sealed payload kept in `inbox/failed/` (the key stays here)."""
        ...

    def count_read(self, slug: str) -> None:
        """Count a get of one memory as a recall of it (a write)."""
        ...

    def prepare_supersede(self, slug: str) -> SupersedeJob | None:
        """The older memories this one may replace, with the rules' verdicts (a read)."""
        ...

    def judge_supersedes_llm(self, job: SupersedeJob) -> None:
        """The LLM judge on the pairs the rules left (touches no store)."""
        ...

    def apply_supersede(self, job: SupersedeJob) -> list[SupersedeDecision]:
        """Write the job's decisions (a write)."""
        ...

    def prepare_profile(self, *, compiled: bool = False, scheduled: bool = False) -> ProfileJob:
        """Collect what an identity rewrite rests on (a read)."""
        ...

    def profile_llm(self, job: ProfileJob) -> None:
        """The LLM's identity rewrite (touches no store)."""
        ...

    def apply_profile(self, job: ProfileJob) -> ProfileRewrite:
        """Write the identity version (a write)."""
        ...

    def count_recalls(self, results: Sequence[RecallResult]) -> None:
        """Count these recalls' hits (a write: the writer thread calls it)."""
        ...

    def prepare_analysis(self, slug: str, *, mode: AnalysisMode = "auto") -> AnalysisJob:
        """Read a session memory and what scoring it needs (a read)."""
        ...

    def apply_analysis(
        self, job: AnalysisJob, outcome: PromotionProposal | MemorydError
    ) -> DuraAnalysis:
        """Write a score and queue its proposal (a write)."""
        ...


class RecallReaders(Protocol):
    """Processes that rank recalls beside the daemon (`memoryd.daemon.readers.ReaderPool`),
    so concurrent recalls use every core."""

    @property
    def ready(self) -> int:
        """How many readers answer now."""
        ...

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run the service's read `name` in a reader; its answer or its MemorydError."""
        ...
