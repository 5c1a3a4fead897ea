"""Recall counts reach the graph every few seconds while recalls are counted; what recall
keeps of the graph (an entity's mentions, the daemon's and its readers' kept reads) must
survive them, unless a count brings a forgotten memory back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memoryd.config import Settings
from memoryd.daemon.readers import ReaderState
from memoryd.models import DecayState, MemoryDraft, MemoryType
from memoryd.wiring import open_service


def test_recall_counts_keep_what_recall_read_of_the_graph(
    settings: Settings, project: Path
) -> None:
    with open_service(settings) as svc:
        graph = svc.graph
        kept = svc.record(
            MemoryDraft(type=MemoryType.PREFERENCE, title="Use React",
                        body="The storefront uses React.", scope_path=project)
        )  # fmt: skip
        gone = svc.record(
            MemoryDraft(type=MemoryType.FACT, title="React hooks",
                        body="The checkout page uses React hooks.", scope_path=project)
        )  # fmt: skip
        react = svc.resolve_entity("React").id
        graph.set_decay_states({gone.slug: DecayState.FORGOTTEN})
        mentions = graph.mentioning([react])
        assert {slug for _, slug, _ in mentions} == {kept.slug}

        statements: list[str] = []
        reads = graph._rows  # type: ignore[attr-defined]

        def counted(query: str, *args: Any, **kwargs: Any) -> Any:
            statements.append(query)
            return reads(query, *args, **kwargs)

        graph._rows = counted  # type: ignore[attr-defined]
        generation, state = graph.generation, ReaderState.of(svc)
        assert graph.record_recalls({kept.slug: (2, svc.clock())}) == {kept.slug: 2}
        assert graph.generation == generation + 1  # a copy of the graph is stale: counts are data
        assert ReaderState.of(svc) == state  # the readers keep what they read
        assert graph.mentioning([react]) == mentions
        assert not [q for q in statements if "MENTIONS" in q]  # from the daemon's own cache

        # Counted, a forgotten memory is alive again: recall must read its mentions anew.
        graph.record_recalls({gone.slug: (1, svc.clock())})
        assert ReaderState.of(svc).graph_generation > state.graph_generation
        assert {slug for _, slug, _ in graph.mentioning([react])} == {kept.slug, gone.slug}
