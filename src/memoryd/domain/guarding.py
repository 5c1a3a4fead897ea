"""Grants and the granted scopes' in-memory views: the service side of `governance.gate`.

`grant` / `revoke` / `grants` are the user's commands; `granted_view` is what every read of
a sensitive scope asks (`get`, `search`, `recall`, `list`): the scope's decrypted memories
in an in-memory index and entity view (`recall.granted`), or None without a grant. The
daemon builds a view as the grant starts (`views_eager`) and drops it when the grant ends
(`expire_grants`, on its schedule tick); an embedded command builds it on first need.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from memoryd.domain.core import ServiceCore
from memoryd.errors import InvalidInput
from memoryd.models import Grant, GrantDuration, Memory, MemoryType, ScopeInfo
from memoryd.recall.granted import ScopeView
from memoryd.scope import resolve_scope
from memoryd.sensitive.files import decrypt_scope
from memoryd.vault import FORGOTTEN_DIR

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
    def scope_plaintext(self, scope_hash: str) -> Iterator[Memory]:
        """Every memory of a sensitive scope, decrypted, for its in-memory view only (a
        missing key is `MissingKey`, naming `import-key`)."""
        for memory in decrypt_scope(self.home, scope_hash, self.keys):
            memory.sensitive = True
            yield memory

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
