"""Grants and the granted scopes' in-memory views: the service side of `governance.gate`.

`grant` / `revoke` / `grants` are the user's commands; `granted_view` is what every read of
a sensitive scope asks (`get`, `search`, `recall`, `list`): the scope's decrypted memories
in an in-memory index and entity view (`recall.granted`), or None without a grant. The
daemon builds a view as the grant starts (`views_eager`) and drops it when the grant ends
(`expire_grants`, on its schedule tick); an embedded command builds it on first need.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from memoryd.domain.core import ServiceCore
from memoryd.errors import (
    BrokenMemoryFile,
    EncryptedFileBroken,
    InvalidInput,
    MemorydError,
    MissingKey,
    NotFound,
)
from memoryd.models import Grant, GrantDuration, Memory, MemoryType, ScopeInfo
from memoryd.recall.granted import (
    Held,
    ScopeView,
    SnapshotOutdated,
    SnapshotUnusable,
    decode_snapshot,
    encode_snapshot,
)
from memoryd.scope import resolve_scope
from memoryd.search.index import SearchIndex
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.files import ScopeCipher
from memoryd.sensitive.snapshot import (
    Fingerprint,
    open_snapshot,
    read_fingerprinted,
    remove_snapshot,
    scan,
    seal_snapshot,
)
from memoryd.vault import FORGOTTEN_DIR, file_slug, parse, render

logger = logging.getLogger(__name__)

_SUBDIRS = (*sorted(t.dir_name for t in MemoryType), FORGOTTEN_DIR)


class Guarding(ServiceCore):
    """Grants to read sensitive scopes, and the views that serve reads under them."""

    def grant(
        self, path: Path | str, duration: GrantDuration = "once", *, task: str | None = None
    ) -> Grant:
        """Allow reads of the sensitive scope at `path` for `duration` (audited)."""
        self._require_writable("grant a read")
        scope = self._sensitive_scope(path)
        grant = self.gate.grant(scope, duration, task)
        if self.views_eager:
            self.granted_view(scope.scope_hash)  # the first recall under it is then fast
        return grant

    def revoke(self, path: Path | str, *, task: str | None = None) -> list[Grant]:
        """End the scope's grants (only `task`'s with a task); its view goes with the last."""
        self._require_writable("revoke a grant")
        scope_hash = self._sensitive_scope(path).scope_hash
        ended = self.gate.revoke(scope_hash, task)
        if not self.gate.granted(scope_hash):
            self.views.drop(scope_hash)
        return ended

    def grants(self) -> list[Grant]:
        """The grants in force now, oldest first."""
        return self.gate.active()

    def expire_grants(self) -> list[Grant]:
        """Remove ended grants and drop the views no grant holds any more."""
        ended = self.gate.expire()
        for scope_hash in self.views.held():
            if not self.gate.granted(scope_hash):
                self.views.drop(scope_hash)
        return ended

    def granted_view(self, scope_hash: str) -> ScopeView | None:
        """The scope's in-memory view while this process may read it, else None."""
        if not self.gate.readable(scope_hash):
            self.views.drop(scope_hash)
            return None
        return self.views.get(scope_hash)

    # -- what a view is built from --------------------------------------------------------
    def scope_held(self, scope_hash: str, view: ScopeView | None) -> tuple[list[Held], bool] | None:
        """The memories of a sensitive scope as its files hold them now, for its in-memory
        view only, and whether they are what its snapshot holds; None when they are exactly
        `view`'s. Only the files that changed since `view` (or, without one, since the
        snapshot) are decrypted and parsed; a missing key is `MissingKey`, naming
        `import-key`."""
        files = scan(self.home, scope_hash)
        if view is not None:
            known = view.held
            if len(known) == len(files) and all(
                (h := known.get(f)) is not None and h.stamp == stamp for f, stamp in files.items()
            ):
                return None
        else:
            known = self._snapshot_held(scope_hash)
        cipher = ScopeCipher(self.keys)
        folder = self.vault.scope_dir(scope_hash)
        held: list[Held] = []
        read = 0
        for file, stamp in files.items():
            found = known.get(file)
            if found is None or found.stamp != stamp:
                read += 1
                found = self._read_held(cipher, scope_hash, folder, file)
                if found is None:
                    continue
            held.append(found)
        if read:
            logger.info("scope %s: %d of %d memory files decrypted", scope_hash, read, len(files))
        return held, view is None and not read and len(held) == len(known)

    def _snapshot_held(self, scope_hash: str) -> dict[str, Held]:
        """The memories the scope's snapshot holds, by file; {} without a usable one (a
        damaged or foreign one is reported and rebuilt, never trusted)."""
        try:
            payload = open_snapshot(self.home, scope_hash, self.keys)
            if payload is None:
                return {}
            return decode_snapshot(payload, scope_hash, self.vault.scope_dir(scope_hash))
        except (EncryptedFileBroken, MissingKey) as exc:  # damaged, or sealed by another key
            logger.warning("rebuilding the view snapshot: %s", exc.message)
        except SnapshotOutdated as exc:  # an upgrade: expected once
            logger.info("rebuilding the view snapshot of scope %s: %s", scope_hash, exc.args[0])
        except SnapshotUnusable as exc:
            logger.warning("rebuilding the view snapshot of scope %s: %s", scope_hash, exc.args[0])
        return {}

    def _read_held(
        self, cipher: ScopeCipher, scope_hash: str, folder: Path, file: str
    ) -> Held | None:
        """One memory file decrypted and parsed; None (logged by name, never by content) when
        it is unreadable or gone."""
        path = folder / file
        try:
            stamp, blob = read_fingerprinted(path)
            raw = cipher.open(blob, scope_hash, file_slug(path), path)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BrokenMemoryFile(f"{path}: not UTF-8 text (byte {exc.start})") from exc
            memory = parse(text, path)
        except MissingKey:
            raise
        except NotFound:
            return None
        except BrokenMemoryFile as exc:
            logger.warning("skipped an unreadable sensitive file: %s", exc.message)
            return None
        return Held.of(memory, file=file, folder=folder, stamp=stamp, text=text)

    def save_sealed(self, scope_hash: str, sealed: Sequence[tuple[Memory, Fingerprint]]) -> None:
        """Seal the snapshot of memories just sealed into their files (marking), with the
        fingerprints of those files, so the first grant decrypts one file."""
        folder = self.vault.scope_dir(scope_hash)
        held = self._snapshot_held(scope_hash) if sealed else {}
        for memory, stamp in sealed:
            path = memory.path or self.vault.path_for(memory)
            file = f"{path.parent.name}/{path.name}"
            text = render(memory)
            held[file] = Held.of(memory, file=file, folder=folder, stamp=stamp, text=text)
        self._seal_held(scope_hash, list(held.values()), None)

    def rekey_snapshot(
        self, scope_hash: str, resealed: Sequence[tuple[Path, bytes, Fingerprint]], key: ScopeKey
    ) -> None:
        """Carry the snapshot over a key rotation: each memory whose file was resealed with
        the same plaintext (its sha256 digest) takes the new file's fingerprint, and the
        snapshot is sealed with the new key. The held view goes (its fingerprints are old)."""
        self.views.drop(scope_hash, save=False)
        known = self._snapshot_held(scope_hash)
        kept: list[Held] = []
        for path, digest, stamp in resealed:
            found = known.get(f"{path.parent.name}/{path.name}")
            if found is not None and hashlib.sha256(found.text.encode()).digest() == digest:
                found.stamp = stamp
                kept.append(found)
        if not kept:
            remove_snapshot(self.home, scope_hash)
            return
        self._seal_held(scope_hash, kept, key)

    def _seal_held(self, scope_hash: str, held: list[Held], key: ScopeKey | None) -> None:
        """Seal `held` as the scope's snapshot (with `key`, else the scope's current one);
        a failure is logged and leaves no snapshot: it is only a cache."""
        if not held:
            return
        index = SearchIndex.in_memory(scope_hash)  # analyses the tokens the held lack
        try:
            seal_snapshot(
                self.home,
                scope_hash,
                key or self.keys.current(scope_hash),
                encode_snapshot(scope_hash, held, index),
            )
        except MemorydError as exc:
            logger.warning("could not save the view snapshot of %s: %s", scope_hash, exc.message)
            remove_snapshot(self.home, scope_hash)
        finally:
            index.close()

    def save_view(self, view: ScopeView) -> None:
        """Seal `view` as its scope's snapshot, so the next grant reads one file (a failure
        is logged: the snapshot is only a cache)."""
        if self.read_only:
            return  # a reader process never writes the data dir
        try:
            if not self.keys.has_keys(view.scope_hash):
                return
            key = self.keys.current(view.scope_hash)
            seal_snapshot(self.home, view.scope_hash, key, view.snapshot())
        except MemorydError as exc:
            logger.warning(
                "could not save the view snapshot of scope %s: %s", view.scope_hash, exc.message
            )
            return
        view.saved = True

    def scope_stamp(self, scope_hash: str) -> object:
        """What changes when a file of the scope is written, moved or removed (an atomic
        rename touches its folder): a view built before it is stale."""
        folder = self.vault.scope_dir(scope_hash)
        stamp = []
        for sub in _SUBDIRS:
            try:
                stamp.append(os.stat(folder / sub).st_mtime_ns)
            except FileNotFoundError:
                stamp.append(0)
        return tuple(stamp)

    def _sensitive_scope(self, path: Path | str) -> ScopeInfo:
        """The scope of `path` (a directory, or a 12-hex scope hash the vault knows)."""
        text = str(path)
        scope_hash = self.scope_hash_of(path)
        stored = self.vault.read_scope(scope_hash) if scope_hash else None
        if stored is not None and (stored.sensitive or not Path(text).exists()):
            return stored
        if not Path(text).exists():
            raise InvalidInput(
                f"{text} is neither a directory nor a known scope hash",
                hint="pass the project directory (`memoryd sensitive status` lists them)",
            )
        info = resolve_scope(path, with_remote=False)
        if stored is not None:
            info.sensitive = info.sensitive or stored.sensitive
        return info
