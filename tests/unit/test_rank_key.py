"""Recall's order: best first, ties by slug, whatever order the evidence was summed in."""

from __future__ import annotations

from memoryd.recall.candidates import rank_key


def test_scores_equal_but_for_summation_order_tie_by_slug() -> None:
    parts = [0.1, 0.2, 0.3, 1e-3, 7e-5]
    forward, backward = sum(parts), sum(reversed(parts))
    assert forward != backward  # the last bits differ
    ranked = sorted([(forward, "b-slug"), (backward, "a-slug")], key=lambda s: rank_key(*s))
    assert [slug for _, slug in ranked] == ["a-slug", "b-slug"]


def test_a_real_difference_still_orders_by_score() -> None:
    ranked = sorted([(0.5, "a"), (0.5 + 1e-6, "b")], key=lambda s: rank_key(*s))
    assert [slug for _, slug in ranked] == ["b", "a"]
