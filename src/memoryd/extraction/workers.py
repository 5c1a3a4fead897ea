"""A big batch's extraction shared with a second process (issue 28: `record_many` at 100k).

Extraction is pure Python and spaCy, so one process extracts on one core, and a batch of
thousands of memories (`record_many`, imports) spends most of its time there. The worker is
`python -m memoryd.extraction.worker_main` with its own `Extractor`, started at the first big
batch and kept for the process's life (its pipelines and lexicon take seconds to build); it
reads chunks of texts on its stdin and answers their extractions on its stdout. Not
`multiprocessing`: its spawned children import the parent's main script again, which runs a
script without a `__main__` guard twice.

A batch is cut into chunks; this process extracts from the head while the worker takes them
from the tail, one at a time, so the two meet wherever their speeds put them (a worker still
starting takes none). The output is one process's: a text's extraction is a function of the
text and the set of known entities (`pipeline`), and the batch comes back in order. A worker
that fails (killed, out of memory, a bug) costs only time: its chunk is extracted here and the
next big batch starts another.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from memoryd.models import Extraction, ProposedEntity, ProposedRelation

log = logging.getLogger(__name__)

CHUNK = 50
"""Texts a chunk: small enough that the two processes finish close together (a chunk is
tens of milliseconds of extraction), large enough that its round trip costs little beside."""
PARALLEL_MIN = 8 * CHUNK
"""A batch this long is shared with the worker; a shorter one is not worth the round trips
(nor, in a fresh process, the worker's start)."""
IDLE_S = 300.0
"""A worker no batch used for this long is stopped (its memory back to the system); the next
big batch starts another."""
_FRAME = struct.Struct("<Q")

Texts = Sequence[tuple[str, str]]


def worker_for(spacy_model: str | None, cache_dir: Path | None) -> ExtractionWorker | None:
    """A worker to share big batches with, or None on one core."""
    return ExtractionWorker(spacy_model, cache_dir) if cores() > 1 else None


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def send(stream: IO[bytes], message: object) -> None:
    import pickle  # only where a worker is used (an embedded open loads none)

    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """The next message, or EOFError when the other side closed its end."""
    import pickle

    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        raise EOFError("the pipe closed")
    (size,) = _FRAME.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed inside a message")
    return pickle.loads(data)


_ENTITY = tuple(ProposedEntity.model_fields)
_RELATION = tuple(ProposedRelation.model_fields)
Packed = list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[str], list[str]]]


def pack(found: Iterable[Extraction]) -> Packed:
    """A chunk's extractions as plain tuples for the pipe: unpickling models costs the
    receiving process about as much again per model as building them from tuples."""
    return [
        (
            [tuple(getattr(e, f) for f in _ENTITY) for e in x.entities],
            [tuple(getattr(r, f) for f in _RELATION) for r in x.relations],
            x.stages,
            x.notes,
        )
        for x in found
    ]


def unpack(packed: Packed) -> list[Extraction]:
    """`pack`'s extractions again, unvalidated: the worker built them from validated ones."""
    entity, relation = ProposedEntity.model_construct, ProposedRelation.model_construct
    return [
        Extraction.model_construct(
            entities=[entity(**dict(zip(_ENTITY, e, strict=True))) for e in entities],
            relations=[relation(**dict(zip(_RELATION, r, strict=True))) for r in relations],
            stages=stages,
            notes=notes,
        )
        for entities, relations, stages, notes in packed
    ]


def waited(
    local: Callable[[Iterable[tuple[str, str]]], Iterator[Extraction]],
    texts: Iterable[tuple[str, str]],
    after: threading.Event | None,
) -> Iterator[Extraction]:
    """`local(texts)` once `after` is set (a batch extracted ahead of its turn waits in this
    process while the worker, if any, starts at once)."""
    if after is not None:
        after.wait()
    yield from local(texts)


class _Batch:
    """One batch's chunks, shared by the generator (head) and the feeding thread (tail)."""

    def __init__(self, chunks: list[Texts]) -> None:
        self.chunks = chunks
        self.head = 0  # next chunk this process takes
        self.tail = len(chunks) - 1  # next chunk the worker takes
        self.done: dict[int, list[Extraction]] = {}
        self.failed = False  # the worker stopped: what it has not answered is done here
        self.stopped = False  # the generator was closed early
        self.cond = threading.Condition()

    def take_head(self) -> int | None:
        with self.cond:
            if self.head > self.tail:
                return None
            self.head += 1
            return self.head - 1

    def take_tail(self) -> int | None:
        with self.cond:
            if self.stopped or self.tail < self.head:
                return None
            self.tail -= 1
            return self.tail + 1


class ExtractionWorker:
    """The second process, started on first use. One batch uses it at a time; a batch that
    finds it busy is extracted in its own process alone."""

    def __init__(self, spacy_model: str | None, cache_dir: Path | None) -> None:
        self._args = (spacy_model, cache_dir)
        self._busy = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._batches = 0
        self._idle: threading.Timer | None = None
        self.chunks_done = 0
        """Chunks the worker answered, over the process's life (tests, benchmarks)."""

    def _start(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        package_root = str(Path(__file__).resolve().parents[2])  # where `memoryd` is
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, path]))}
        process = subprocess.Popen(
            [sys.executable, "-m", "memoryd.extraction.worker_main"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert process.stdin is not None
        send(process.stdin, self._args)
        self._process = process
        return process

    def pid(self) -> int | None:
        """The worker's process id while it runs (tests, benchmarks)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def close(self) -> None:
        """Stop the worker: it exits when its stdin closes."""
        with self._busy:
            self._stop()

    def _stop_when_idle(self, number: int) -> None:
        """The idle timer's end: stop the worker unless a batch used it since."""
        if self._busy.acquire(blocking=False):
            try:
                if self._batches == number:
                    self._stop()
            finally:
                self._busy.release()

    def _stop(self) -> None:
        """Call holding `_busy`."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        assert process.stdout is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    def extract_many(
        self,
        texts: Iterable[tuple[str, str]],
        known: Sequence[object],
        local: Callable[[Iterable[tuple[str, str]]], Iterator[Extraction]],
        after: threading.Event | None = None,
    ) -> Iterator[Extraction]:
        """Each text's extraction in order; `local` extracts a chunk in this process, only
        once `after` is set (the worker takes chunks from the start: a batch extracted
        while this process writes the one before). A batch shorter than `PARALLEL_MIN` is
        all extracted here."""
        if not isinstance(texts, Sequence) or len(texts) < PARALLEL_MIN:
            yield from waited(local, texts, after)
            return
        if not self._busy.acquire(blocking=False):
            yield from waited(local, texts, after)
            return
        try:
            if self._idle is not None:
                self._idle.cancel()
            yield from self._shared(texts, known, local, after)
        finally:
            if self._process is not None:
                self._idle = threading.Timer(IDLE_S, self._stop_when_idle, (self._batches,))
                self._idle.daemon = True
                self._idle.start()
            self._busy.release()

    def _shared(
        self,
        texts: Texts,
        known: Sequence[object],
        local: Callable[[Iterable[tuple[str, str]]], Iterator[Extraction]],
        after: threading.Event | None,
    ) -> Iterator[Extraction]:
        batch = _Batch([texts[i : i + CHUNK] for i in range(0, len(texts), CHUNK)])
        self._batches += 1
        feeder = threading.Thread(
            target=self._feed,
            args=(batch, self._batches, list(known)),
            name="extraction-feeder",
            daemon=True,
        )
        feeder.start()
        try:
            if after is not None:
                after.wait()
            while (i := batch.take_head()) is not None:
                yield from local(batch.chunks[i])
            for i in range(batch.head, len(batch.chunks)):
                with batch.cond:
                    batch.cond.wait_for(lambda i=i: i in batch.done or batch.failed)  # type: ignore[misc]
                    found = batch.done.pop(i, None)
                yield from local(batch.chunks[i]) if found is None else found
        finally:
            with batch.cond:
                batch.stopped = True
            feeder.join()

    def _feed(self, batch: _Batch, number: int, known: list[object]) -> None:
        """Send the worker the tail's chunks one at a time and keep what it answers."""
        import pickle

        first = True
        try:
            process = self._start()
            assert process.stdin is not None
            assert process.stdout is not None
            while (i := batch.take_tail()) is not None:
                send(process.stdin, (number, known if first else None, batch.chunks[i]))
                first = False
                answer = receive(process.stdout)
                if isinstance(answer, str):  # the worker's error, said once
                    raise RuntimeError(answer)
                found = unpack(answer)
                with batch.cond:
                    batch.done[i] = found
                    batch.cond.notify_all()
                self.chunks_done += 1
        except (
            OSError,
            EOFError,
            RuntimeError,
            TypeError,
            ValueError,
            pickle.UnpicklingError,
        ) as exc:
            log.warning("the extraction worker stopped (%s); extracting in this process", exc)
            self._stop_broken()
        finally:
            with batch.cond:
                batch.failed = True  # nothing more comes from the worker for this batch
                batch.cond.notify_all()

    def _stop_broken(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
