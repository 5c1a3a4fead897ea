"""Conversation context: rules for memories that are turns of a conversation (short session
memories, one per turn): a turn that only asks, its neighbours, its length."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta

from memoryd.models import MemoryType
from memoryd.recall.candidates import TurnShape
from memoryd.sessions.summary import TITLE_CHARS

CONTEXT_SEEDS = 8
"""The best text hits whose neighbouring session turns share their score (fewer since the
index holds each turn's neighbours as its context, `TEXT_CONTEXT_BOOST`)."""
CONTEXT_SPREAD = (0.5, 0.3)
"""Share of a text hit's BM25 score given to the session turns one and two steps away: in a
conversation the answer is often the reply to (or the lead-up of) the turn that matched."""
TELLING_SPREAD = 0.5
"""The part of `CONTEXT_SPREAD` a matching turn lends when it tells something rather than only
asks: it answers for itself, so its neighbours matter less than the reply to a question does.
At the full share a telling turn's neighbours crowded the answers from other sessions out of
the top ten (measured: bench/RESULTS.md)."""
CONTEXT_WINDOW = timedelta(minutes=30)

ASKING_PENALTY = 0.65
"""For a session turn that ends by asking, on its text score (so it still leads its
neighbours): a question carries no fact of its own; the reply does, and it gets a share of
the question's text score as context."""
ASKING_MAX_TOLD = 12
"""A turn that ends by asking but tells this many words besides (a speaker label counts)
carries a fact too: "Just started aerial yoga, it's great. Have you tried it?"."""
LENGTH_EXPONENT = 0.5
LENGTH_FACTOR_RANGE = (0.75, 1.35)
"""After fusion, session turns longer than the candidates' median gain a little, shorter ones
lose a little: BM25's length normalisation favours "Do you paint too?" over the turn that
tells what was painted. The factor is the square root of the length ratio, bounded: on the
calibrated text scale (shares of the query, not ranks) a fifth power barely moved a turn
(measured: bench/RESULTS.md)."""


TURN_MAX_WORDS = 150
TURN_MAX_LINES = 3
"""The shape of a conversation turn: a session memory of one utterance, at most this many
words on at most this many lines. A captured or recorded whole session (many `user:` /
`assistant:` lines, a summary) is not a turn, and the turn rules below never touch it."""


def is_turn(memory_type: MemoryType, body: str) -> bool:
    """Whether a memory is one turn of a conversation, by what it is: a session memory
    holding a single short utterance (`TURN_MAX_WORDS`, `TURN_MAX_LINES`). The conversation
    rules (a turn that only asks, neighbour spreading, length against the median, speaker
    titles) apply to such memories only."""
    if memory_type is not MemoryType.SESSION:
        return False
    # Split at most past the limit: a whole session's body is thousands of words.
    return (
        body.count("\n") < TURN_MAX_LINES
        and len(body.split(None, TURN_MAX_WORDS)) <= TURN_MAX_WORDS
    )


_ATTACHMENT = re.compile(r"\s*\[[^\[\]]*\]\s*$")


_SENTENCE_END = re.compile(r"(?<=[.!?？。！])\s+")


def only_asks(body: str) -> bool:
    """Whether a turn ends by asking and tells little else: fewer than `ASKING_MAX_TOLD`
    words outside its questions ("Thanks, Mel! Do you paint?"). An attachment note after
    the question ("[shares a photo: …]") does not count."""
    said = _ATTACHMENT.sub("", body).rstrip()
    if not said.endswith(("?", "？")):
        return False
    told = [s for s in _SENTENCE_END.split(said) if not s.rstrip().endswith(("?", "？"))]
    return sum(len(s.split()) for s in told) < ASKING_MAX_TOLD


def turn_shapes(bodies: Mapping[str, str]) -> dict[str, TurnShape]:
    """The shape of each session turn among the candidates (`bodies` by slug): its length
    against the median, and whether it only asks (`only_asks`)."""
    counted = {slug: len(body.split()) for slug, body in bodies.items()}
    lengths = sorted(counted.values())
    median = float(lengths[len(lengths) // 2]) if lengths else 1.0
    low, high = LENGTH_FACTOR_RANGE
    shapes = {}
    for slug, body in bodies.items():
        ratio = max(counted[slug], 1) / max(median, 1.0)
        shapes[slug] = TurnShape(
            words=counted[slug],
            asks=only_asks(body),
            length_factor=min(high, max(low, float(ratio**LENGTH_EXPONENT))),
        )
    return shapes


_OPENING = re.compile(r"\A\s*(?:user|human)\s*:\s*(.+)", re.IGNORECASE)
OPENING_CHARS = TITLE_CHARS
"""As much of a session's opening request as a captured session's title holds."""


def opening_request(body: str) -> str:
    """The first line of a whole session's opening request, when its body is a transcript
    that opens with the user's turn ("user: Add rate limiting to …"): what the session is
    about, as `memoryd capture` titles a session. Empty for any other body."""
    match = _OPENING.match(body)
    return match.group(1).strip()[:OPENING_CHARS] if match else ""
