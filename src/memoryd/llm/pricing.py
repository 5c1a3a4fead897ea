"""LLM list prices, for the cost estimate every call reports (`Usage.cost_usd`).

Kept apart from the provider seam (`llm.base`) because it changes on the providers'
schedule, not ours: `PRICES_AS_OF` says when it was last checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    """List price in USD per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


PRICES_AS_OF = "2026-03"
"""When the table below was checked against the providers' published pricing pages."""

PRICES: Mapping[str, Price] = {
    # Anthropic, standard tier, prompts under 200k tokens, no cache or batch discount.
    "claude-opus-4-6": Price(5.00, 25.00),
    "claude-opus-4-5": Price(5.00, 25.00),
    "claude-opus-4-1": Price(15.00, 75.00),
    "claude-opus-4-0": Price(15.00, 75.00),
    "claude-opus-4": Price(15.00, 75.00),
    "claude-sonnet-4-6": Price(3.00, 15.00),
    "claude-sonnet-4-5": Price(3.00, 15.00),
    "claude-sonnet-4-0": Price(3.00, 15.00),
    "claude-sonnet-4": Price(3.00, 15.00),
    "claude-haiku-4-5": Price(1.00, 5.00),
    "claude-3-5-haiku": Price(0.80, 4.00),
    "claude-3-haiku": Price(0.25, 1.25),
    # OpenAI, standard tier, no cached-input discount.
    "gpt-5": Price(1.25, 10.00),
    "gpt-5-mini": Price(0.25, 2.00),
    "gpt-5-nano": Price(0.05, 0.40),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
}
"""Per-model prices used for the cost estimate; a model not listed gets cost None.

A dated snapshot of a listed model (`claude-haiku-4-5-20251001`, `gpt-4o-mini-2024-07-18`)
or its `-latest` alias is priced as the model; anything else is unknown, so a new model
is never silently priced as an older one.
"""

_SNAPSHOT_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)")


def price_for(model: str) -> Price | None:
    """The list price of `model`, or None when the table does not know it."""
    model = model.strip().lower()
    if model in PRICES:
        return PRICES[model]
    for key in sorted(PRICES, key=len, reverse=True):
        if model.startswith(key) and _SNAPSHOT_SUFFIX.fullmatch(model[len(key) :]):
            return PRICES[key]
    return None
