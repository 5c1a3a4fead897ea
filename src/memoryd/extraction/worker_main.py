"""The extraction worker's process (`python -m memoryd.extraction.worker_main`, started by
`extraction.workers`): its own `Extractor`, fed chunks of texts on stdin."""

from __future__ import annotations

import os
import sys
from typing import Any

from memoryd import native
from memoryd.extraction.pipeline import Extractor
from memoryd.extraction.workers import pack, receive, send


def main() -> None:
    """The worker: (spacy_model, cache_dir), then (batch, known or None, texts) chunks, each
    answered with its extractions; exits when stdin closes."""
    inbox = sys.stdin.buffer
    outbox = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print cannot break the pipe
    spacy_model, cache_dir = receive(inbox)
    extractor = Extractor(spacy_model=spacy_model, cache_dir=cache_dir, workers=False)
    extractor.warm_up()
    # The warmed-up pipelines and matchers live as long as the worker: frozen out of the
    # cyclic GC, as a bulk write's objects are (`native.fewer_collections`).
    with native.fewer_collections():
        _serve(extractor, inbox, outbox)


def _serve(extractor: Extractor, inbox: Any, outbox: Any) -> None:
    """Answer chunks until stdin closes."""
    known: list[Any] = []
    batch = -1
    while True:
        try:
            number, sent, texts = receive(inbox)
        except EOFError:
            return
        if sent is not None or number != batch:
            known, batch = sent or [], number
        try:
            answer: object = pack(extractor.extract_many(texts, known=known))
        except Exception as exc:  # said to the parent, which extracts the chunk itself
            answer = f"{type(exc).__name__}: {exc}"
        send(outbox, answer)


if __name__ == "__main__":
    main()
