"""Marking a scope sensitive, and keeping it so: encrypting its files, scrubbing what the
other stores hold of it, rotating its key, and unmarking it under a grant.

Marking writes the marker at the scope root, makes the key (keyring, or scrypt from a
passphrase), the capture key pair and `scope.json` first, so from then on the hook seals and
every write encrypts; then each plaintext file becomes `<opaque slug>.md.enc` (the slug is
derived from the old one with the scope key, so a mark cut short and run again makes the same
names; a captured session takes the slug its next sealed capture computes from the session
id and the scope's public key, so a session that goes on after the mark updates the same
memory, and its plain hook-event journal is sealed too), the plaintext is removed, and the
graph and the search index are rebuilt from the vault, where the scope is only skeletons
(`Memory.skeleton`): nothing of the old content survives in a free page or a WAL.
governance.db forgets the scope's promotions, trigger counts and enrichment rows (zeroing
their pages).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from memoryd.audit import AuditEvent
from memoryd.domain.core import ServiceCore
from memoryd.domain.writes import search_doc
from memoryd.errors import InvalidInput, MemorydError, MissingKey, NotFound
from memoryd.inbox import Inbox
from memoryd.journal import IntentItem
from memoryd.memfile import compose, sealed_session_slug
from memoryd.models import Memory, MemoryType, ReindexReport, ScopeInfo
from memoryd.private import make_private_dir
from memoryd.scope import SENSITIVE_MARKER, resolve_scope
from memoryd.sensitive.envelope import ScopeKey
from memoryd.sensitive.files import (
    create_seal_pair,
    encrypted_files,
    fsync_all,
    plain_files,
    remove_seal_pair,
    reseal,
    reseal_seal_key,
    seal_private_key,
)
from memoryd.sensitive.heap import scrub_freed_heap
from memoryd.sensitive.sealed import (
    SealError,
    failed_scope,
    open_sealed,
    read_public_key,
    seal_for,
    waiting_captures,
)
from memoryd.sensitive.snapshot import Fingerprint, remove_snapshot
from memoryd.sessions.journal import (
    SealedJournal,
    SealedPlan,
    assemble_sealed,
    decode_events,
    journal_key,
    plain_journals_of,
    seal_plain_journal,
)
from memoryd.vault import ENCRYPTED_SUFFIX, atomic_write, parse, render

logger = logging.getLogger(__name__)

_WAITING_FOR_KEY: set[str] = set()
"""Scopes whose sealed captures wait for a missing key, already logged by this process."""

MARKER_TEXT = (
    "This project's memories are encrypted at rest by memoryd and read only under a grant.\n"
    "`memoryd sensitive status` shows the scope; `memoryd sensitive unmark PATH --yes` undoes it.\n"
)


class MarkReport(BaseModel):
    scope_hash: str
    path: str
    marker: str
    key_id: str
    key_mode: str
    encrypted: int = Field(description="plaintext memory files sealed by this mark")
    scrubbed: int = Field(description="governance.db rows removed (promotions, triggers, queue)")
    seconds: float


class RotateReport(BaseModel):
    scope_hash: str
    path: str
    old_keys: list[str]
    key_id: str
    resealed: int


class UnmarkReport(BaseModel):
    scope_hash: str
    path: str
    decrypted: int


class SealedRetryReport(BaseModel):
    """`memoryd capture retry` of the sealed payloads kept in `inbox/failed/`."""

    processed: int
    failing: int
    errors: list[str] = Field(description="one line per file still failing: its name and why")


class SensitiveStatus(BaseModel):
    """One sensitive scope as this machine sees it."""

    scope_hash: str
    path: str
    marker: bool = Field(description="the marker file is at the scope root")
    key_id: str | None
    key_modes: list[str]
    key_available: bool
    key_problem: str | None = None
    encrypted: int
    plaintext: int = Field(description="plaintext files left (a mark cut short: mark again)")
    capture_key: bool = Field(description="the capture public key is there (seal.pub)")


def _opaque(key: ScopeKey, old_slug: str, created: datetime) -> str:
    """A sensitive memory's slug for a plaintext one: date, then a keyed hash of the old slug
    (says nothing without the key; the same on a second run, so a mark resumes)."""
    digest = hmac.new(key.secret, old_slug.encode("utf-8"), hashlib.sha256).hexdigest()[:12]
    return f"{created.strftime('%Y-%m-%d')}-s-{digest}"


def _forget_box(box: Path, read: os.stat_result) -> None:
    """Remove a sealed capture that was handled, unless a newer capture replaced it meanwhile
    (then it stays for the next drain)."""
    try:
        current = box.stat()
    except FileNotFoundError:
        return
    if (current.st_ino, current.st_mtime_ns) == (read.st_ino, read.st_mtime_ns):
        box.unlink(missing_ok=True)


class Sensitivity(ServiceCore):
    """`memoryd sensitive mark|unmark|status|rotate-key`."""

    reindex: Callable[..., ReindexReport]
    """Provided by `domain.maintenance.Maintenance`: mark and unmark rebuild the graph and
    the index from the vault."""

    # -- mark -----------------------------------------------------------------------------
    def sensitive_mark(self, path: Path | str, *, passphrase: str | None = None) -> MarkReport:
        """Make the scope at `path` sensitive and encrypt everything it holds."""
        self._require_writable("mark a scope sensitive")
        scrub_freed_heap()  # the plaintext freed from here on is cleared (sensitive.heap)
        started = time.perf_counter()
        info = resolve_scope(path)
        scope_hash = info.scope_hash
        key = self._key_scope(info, passphrase)
        marker = Path(info.path) / SENSITIVE_MARKER
        old_slugs, sealed = self._seal_plain_files(scope_hash, key)
        encrypted = len(sealed)
        self._drop_inbox_requests(scope_hash)
        scrubbed = self.governance.forget_scope(scope_hash, old_slugs)
        self.audit.append_many(
            [
                AuditEvent(
                    actor=self.actor,
                    event_type="sensitive_mark",
                    scope_hash=scope_hash,
                    target_id=scope_hash,
                    details={"encrypted": encrypted, "key": key.key_id.hex()},
                )
            ]
        )
        self.reindex()  # graph and index afresh: no page of either keeps the old text
        self._scopes_changed()
        self.save_sealed(scope_hash, sealed)  # so the first grant decrypts one file
        modes = self._key_modes(scope_hash)
        return MarkReport(
            scope_hash=scope_hash,
            path=info.path,
            marker=str(marker),
            key_id=key.key_id.hex(),
            key_mode=modes[0] if modes else "keyring",
            encrypted=encrypted,
            scrubbed=scrubbed,
            seconds=round(time.perf_counter() - started, 3),
        )

    def _seal_plain_files(
        self, scope_hash: str, key: ScopeKey
    ) -> tuple[list[str], list[tuple[Memory, Fingerprint]]]:
        """Every plaintext memory of the scope, sealed under an opaque slug; links between
        them follow the rename. Returns the old slugs and the sealed memories with their
        files' fingerprints (for the scope's view snapshot)."""
        paths = plain_files(self.home, scope_hash)
        memories: list[Memory] = []
        for path in paths:
            try:
                memories.append(self.vault.read(path))
            except MemorydError as exc:
                # A hand-broken file cannot be parsed, so it cannot be re-slugged: it is sealed
                # as it is below, under its own name, and `doctor` reports it.
                logger.warning("sealing an unparsable file as it is: %s", exc)
                self._seal_raw(path, scope_hash)
        public = read_public_key(self.home, scope_hash)
        renamed = {m.slug: self._sensitive_slug(key, public, m) for m in memories}
        if public is not None:
            self._seal_plain_journals(scope_hash, public, memories)
        sealed: list[tuple[str, Memory]] = []
        for memory in memories:
            meta = memory.meta
            old_path = memory.path
            assert old_path is not None  # read from a file
            meta.supersedes = [renamed.get(s, s) for s in meta.supersedes]
            if meta.promoted_from is not None:
                meta.promoted_from = renamed.get(meta.promoted_from, meta.promoted_from)
            meta.relations = [
                r.model_copy(
                    update={
                        "object": renamed.get(r.object, r.object),
                        "subject": renamed.get(r.subject, r.subject) if r.subject else None,
                    }
                )
                for r in meta.relations
            ]
            meta.supersede_decisions = [
                d.model_copy(update={"older": renamed.get(d.older, d.older)})
                for d in meta.supersede_decisions
            ]
            old_slug = meta.slug
            meta.slug = renamed[old_slug]
            memory.sensitive = True
            memory.path = old_path.parent / f"{meta.slug}{ENCRYPTED_SUFFIX}"
            sealed.append((old_slug, memory))

        def write(item: tuple[str, Memory]) -> tuple[Memory, Fingerprint]:
            with self._file_lock(item[0]):
                # The new name is opaque and new: nothing else writes it before this stat.
                written = self.vault.write(item[1], sync=False)
                return item[1], Fingerprint.of(os.stat(written))

        # Creating files is syscall-bound and releases the GIL: a few threads (as bulk record).
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = list(pool.map(write, sealed))
        fsync_all()  # every sealed file is on disk before any plaintext goes
        # The audit lines written before the mark name these memories by title-derived
        # slugs: re-chained with the opaque ones before the plaintext goes, so a crash
        # before this point leaves the plain files for a second mark to do it all again.
        renames = {old: memory.slug for old, memory in sealed}
        self.vault.carry_decay(scope_hash, renames)  # the decay ledger names them the same way
        self.audit.redact_slugs(renames, actor=self.actor, scope_hash=scope_hash)
        self.vault.remove_many(paths)
        self.vault.drop_decay(scope_hash, renames)
        return list(renamed), done

    def _key_scope(self, info: ScopeInfo, passphrase: str | None = None) -> ScopeKey:
        """What a scope needs before any of its memories is sealed: its key (made now when it
        has none), its capture key pair, `scope.json` flagged sensitive and the marker at its
        root. `sensitive mark` and a sync import whose sealed memories land in a new scope
        both start here."""
        scope_hash = info.scope_hash
        if self.keys.has_keys(scope_hash):
            if passphrase is not None:
                logger.info("scope %s has a key already: --passphrase is not used", scope_hash)
            key = self.keys.current(scope_hash)
        else:
            key = self.keys.create(scope_hash, passphrase=passphrase)
        if read_public_key(self.home, scope_hash) is None:
            create_seal_pair(self.home, scope_hash, key)
        info.sensitive = True
        self._ensure_scope(info)
        marker = Path(info.path) / SENSITIVE_MARKER
        if marker.parent.is_dir() and not marker.is_file():
            atomic_write(marker, MARKER_TEXT.encode("utf-8"))
        return key

    @staticmethod
    def _sensitive_slug(key: ScopeKey, public: bytes | None, memory: Memory) -> str:
        """A captured session takes the slug its next capture will seal under (from the
        session id and the scope's public key: as opaque), so a session that goes on after
        the mark updates this memory; every other memory an opaque keyed slug."""
        extra = memory.meta.model_extra or {}
        agent, session_id = extra.get("agent"), extra.get("session_id")
        if (
            public is not None
            and memory.meta.type is MemoryType.SESSION
            and isinstance(agent, str)
            and isinstance(session_id, str)
            and agent
            and session_id
        ):
            return sealed_session_slug(public, agent, session_id)
        return _opaque(key, memory.slug, memory.meta.created_at)

    def _seal_plain_journals(self, scope_hash: str, public: bytes, memories: list[Memory]) -> None:
        """The hook-event journals of the scope's sessions (those its memories name, and
        those whose events name the scope), sealed for its public key: a session's next
        capture reads on from there, and no plain journal of the scope stays."""
        keys = set(plain_journals_of(self.home, scope_hash))
        for memory in memories:
            extra = memory.meta.model_extra or {}
            agent, session_id = extra.get("agent"), extra.get("session_id")
            if isinstance(agent, str) and isinstance(session_id, str):
                keys.add(journal_key(agent, session_id))
        for key in sorted(keys):
            seal_plain_journal(self.home, key, lambda data: seal_for(public, data, scope_hash))

    def _seal_raw(self, path: Path, scope_hash: str) -> None:
        from memoryd.sensitive.envelope import seal

        slug = path.name.removesuffix(".md")
        blob = seal(path.read_bytes(), self.keys.current(scope_hash), scope_hash, slug)
        atomic_write(path.with_name(f"{slug}{ENCRYPTED_SUFFIX}"), blob)

    def _drop_inbox_requests(self, scope_hash: str) -> None:
        """Index requests of the scope name plaintext files that are gone: the rebuild that
        follows indexes their skeletons instead."""
        inbox = Inbox(self.home)
        for pending in inbox.pending():
            if pending.request.scope_hash == scope_hash:
                inbox.done(pending)

    def _scopes_changed(self) -> None:
        """Tell the gate to read the scopes' flags afresh, and drop views of what changed."""
        self.gate.forget_scopes()
        self.views.drop_all()

    # -- sealed captures ------------------------------------------------------------------
    def drain_sealed(self) -> int:
        """Open the sessions the hook sealed for sensitive scopes (`inbox/sealed/`) and merge
        each into its encrypted memory; returns how many were written. A box stays while
        its scope's key is missing; one that cannot be opened moves to `inbox/failed/`."""
        self._require_writable("index sealed captures")
        written = 0
        private: dict[str, bytes] = {}
        for scope_hash, box in waiting_captures(self.home):
            try:
                stat = box.stat()
                if scope_hash not in private:
                    private[scope_hash] = seal_private_key(self.home, scope_hash, self.keys)
                data = json.loads(
                    open_sealed(box.read_bytes(), private[scope_hash], scope_hash, box)
                )
                fields, body = data["fields"], str(data["body"])
                if data.get("journal") is not None:
                    assembled = self._assemble_journal(
                        scope_hash, private[scope_hash], data["journal"], fields
                    )
                    if isinstance(assembled, str):
                        logger.info("sealed session %s not kept: %s", fields["slug"], assembled)
                        _forget_box(box, stat)
                        continue
                    fields, body = assembled
                self._merge_sealed(scope_hash, fields, body)
            except MissingKey as exc:
                if scope_hash not in _WAITING_FOR_KEY:  # once per process: the daemon polls
                    _WAITING_FOR_KEY.add(scope_hash)
                    logger.warning(
                        "sealed captures of scope %s wait for its key: %s", scope_hash, exc
                    )
                private.pop(scope_hash, None)
                continue
            except (SealError, ValueError, KeyError, TypeError) as exc:
                logger.warning("setting aside a sealed capture that does not open: %s", exc)
                failed = Inbox(self.home).failed_dir / f"{scope_hash}-{box.name}"
                make_private_dir(failed.parent)
                os.replace(box, failed)
                continue
            except OSError as exc:
                logger.warning("sealed capture %s not read: %s", box.name, exc)
                continue
            written += 1
            _forget_box(box, stat)
        return written

    def open_failed_capture(self, path: Path) -> bytes:
        """The plaintext of a sealed file of `inbox/failed/` (a payload the hook could not
        capture, or a session box the drain set aside), opened with its scope's capture key:
        only here, where the key is, never in the hook. `MissingKey` (naming `import-key`)
        when this machine lacks it; `SealError` when the file does not open."""
        failed_dir = Inbox(self.home).failed_dir
        if path.parent.resolve() != failed_dir.resolve():
            raise InvalidInput(f"{path} is not in {failed_dir}", hint="memoryd capture retry")
        scope_hash = failed_scope(path)
        return open_sealed(
            path.read_bytes(), seal_private_key(self.home, scope_hash, self.keys), scope_hash, path
        )

    def _assemble_journal(
        self, scope_hash: str, private: bytes, raw_plan: Any, fields: dict[str, Any]
    ) -> tuple[dict[str, Any], str] | str:
        """A journaled session made whole from its sealed journal: the fields and body, or
        why it is trivial. The rendering call's events are in the journal too (the hook
        appends them before it seals the box), so an unreadable journal makes a trivial
        session, which leaves the memory as it was rather than overwriting it."""
        plan = SealedPlan.from_json(raw_plan)
        sealed = SealedJournal(self.home, plan.journal)
        events: list[dict[str, Any]] = []
        for number, box in enumerate(sealed.boxes(), start=1):
            try:
                events += decode_events(open_sealed(box, private, scope_hash, sealed.path))
            except (SealError, ValueError) as exc:  # names the file, never its content
                logger.warning("skipped box %d of a sealed journal: %s", number, exc)
        return assemble_sealed(plan, events, fields)

    def _merge_sealed(self, scope_hash: str, fields: dict[str, Any], body: str) -> None:
        """Write one opened session into its encrypted memory, as the hook writes a plain one
        (`memfile.compose`), then its skeleton to the graph and a `capture` audit line."""
        slug = str(fields["slug"])
        if str(fields.get("scope_hash")) != scope_hash:
            raise ValueError(f"sealed capture {slug} names another scope")
        with self._file_lock(slug):
            path = self.vault.find(slug)
            existing = render(self.vault.read(path)) if path is not None else None
            target = path or (
                self.vault.scope_dir(scope_hash) / "sessions" / f"{slug}{ENCRYPTED_SUFFIX}"
            )
            memory = parse(compose(existing, fields, body), target)
            memory.sensitive = True
            memory.path = target
            self._extract([memory])  # in memory; into the sealed file only (LLM: if allowed)
            item = IntentItem(
                slug=slug,
                path=str(target),
                event_type="capture",
                scope_hash=scope_hash,
                details={"type": "session", "source": memory.meta.source, "update": bool(path)},
            )
            intent = self._begin_write("capture", [item])
            try:
                self.vault.write(memory)
                self.graph.upsert_memories([memory])
                self.index.upsert([search_doc(memory)])
                self.audit.append_many([self._intended_event(intent, item)])
            finally:
                self.journal.end(intent)

    # -- rotate ---------------------------------------------------------------------------
    def sensitive_rotate_key(
        self, path: Path | str, *, passphrase: str | None = None
    ) -> RotateReport:
        """Seal every file of the scope again under a new key, then forget the old ones.

        Files name their key, so a rotation cut short leaves a readable mix; run it again."""
        self._require_writable("rotate a scope key")
        info = self._marked_scope(path)
        scope_hash = info.scope_hash
        old_ids = sorted(self.keys.read_key_file(scope_hash).keys)  # type: ignore[union-attr]
        modes = self._key_modes(scope_hash)
        if "passphrase" in modes and passphrase is None:
            raise InvalidInput(
                "this scope's key is derived from a passphrase: give the new one",
                hint="memoryd sensitive rotate-key PATH --passphrase",
            )
        old_keys = [self.keys.get(scope_hash, bytes.fromhex(k)) for k in old_ids]
        new = self.keys.create(scope_hash, passphrase=passphrase)
        files = encrypted_files(self.home, scope_hash)

        def write(file: Path) -> tuple[Path, bytes, Fingerprint]:
            with self._file_lock(file.name.removesuffix(ENCRYPTED_SUFFIX)):
                plaintext = reseal(file, self.keys, new)
                return file, hashlib.sha256(plaintext).digest(), Fingerprint.of(os.stat(file))

        with ThreadPoolExecutor(max_workers=4) as pool:
            resealed = list(pool.map(write, files))
        reseal_seal_key(self.home, scope_hash, self.keys, new)
        fsync_all()
        # The snapshot follows its files to the new key (while the old one still opens it).
        self.rekey_snapshot(scope_hash, resealed, new)
        self.keys.make_current(scope_hash, new)
        for old in old_keys:
            self.keys.drop(scope_hash, old)
        self.audit.append_many(
            [
                AuditEvent(
                    actor=self.actor,
                    event_type="sensitive_rotate",
                    scope_hash=scope_hash,
                    target_id=scope_hash,
                    details={"resealed": len(files), "key": new.key_id.hex(), "old": old_ids},
                )
            ]
        )
        return RotateReport(
            scope_hash=scope_hash,
            path=info.path,
            old_keys=old_ids,
            key_id=new.key_id.hex(),
            resealed=len(files),
        )

    # -- status ---------------------------------------------------------------------------
    def sensitive_status(self) -> list[SensitiveStatus]:
        """Every sensitive scope: its key (and whether this machine has it) and its files."""
        found: list[SensitiveStatus] = []
        for info in self.vault.scopes():
            if not info.sensitive and not self.keys.has_keys(info.scope_hash):
                continue
            found.append(self._status(info))
        return found

    def _status(self, info: ScopeInfo) -> SensitiveStatus:
        scope_hash = info.scope_hash
        keys = self.keys.read_key_file(scope_hash)
        problem: str | None = None
        try:
            self.keys.current(scope_hash)
        except MissingKey as exc:
            problem = f"{exc.message} ({exc.hint})"
        return SensitiveStatus(
            scope_hash=scope_hash,
            path=info.path,
            marker=(Path(info.path) / SENSITIVE_MARKER).is_file(),
            key_id=keys.current if keys is not None and keys.current else None,
            key_modes=self._key_modes(scope_hash),
            key_available=problem is None,
            key_problem=problem,
            encrypted=len(encrypted_files(self.home, scope_hash)),
            plaintext=len(plain_files(self.home, scope_hash)),
            capture_key=read_public_key(self.home, scope_hash) is not None,
        )

    def _key_modes(self, scope_hash: str) -> list[str]:
        keys = self.keys.read_key_file(scope_hash)
        if keys is None:
            return []
        return sorted({str(entry.get("mode", "keyring")) for entry in keys.keys.values()})

    def _marked_scope(self, path: Path | str) -> ScopeInfo:
        info = resolve_scope(path)
        stored = self.vault.read_scope(info.scope_hash)
        if stored is None or not stored.sensitive or not self.keys.has_keys(info.scope_hash):
            raise NotFound(
                f"scope {info.path} is not marked sensitive",
                hint=f"mark it first: memoryd sensitive mark {info.path}",
            )
        info.sensitive = True
        return info

    # -- unmark ---------------------------------------------------------------------------
    def sensitive_unmark(self, path: Path | str, *, yes: bool = False) -> UnmarkReport:
        """Decrypt the scope back to plaintext files and forget its keys. Needs `yes` and a
        grant to read the scope (the gate's), since it makes every memory readable."""
        self._require_writable("unmark a sensitive scope")
        if not yes:
            raise InvalidInput(
                "unmarking writes every memory of the scope back in plaintext",
                hint="confirm with --yes",
            )
        info = self._marked_scope(path)
        scope_hash = info.scope_hash
        self._require_unmark_grant(info)
        files = encrypted_files(self.home, scope_hash)
        memories = [self.vault.read(file) for file in files]  # every key needed is here
        for memory, file in zip(memories, files, strict=True):
            memory.sensitive = False
            memory.path = file.with_name(f"{memory.slug}.md")
            with self._file_lock(memory.slug):
                self.vault.write(memory, sync=False)
        fsync_all()
        self.vault.remove_many(files)
        self.views.drop(scope_hash, save=False)
        remove_snapshot(self.home, scope_hash)
        info.sensitive = False
        self._ensure_scope(info)
        (Path(info.path) / SENSITIVE_MARKER).unlink(missing_ok=True)
        remove_seal_pair(self.home, scope_hash)
        keys = self.keys.read_key_file(scope_hash)
        for hex_id in sorted(keys.keys) if keys is not None else []:
            self.keys.drop(scope_hash, self.keys.get(scope_hash, bytes.fromhex(hex_id)))
        self.audit.append_many(
            [
                AuditEvent(
                    actor=self.actor,
                    event_type="sensitive_unmark",
                    scope_hash=scope_hash,
                    target_id=scope_hash,
                    details={"decrypted": len(files)},
                )
            ]
        )
        self.reindex()
        self._scopes_changed()
        return UnmarkReport(scope_hash=scope_hash, path=info.path, decrypted=len(files))

    def _require_unmark_grant(self, info: ScopeInfo) -> None:
        """Unmark reads every memory of the scope: the gate must allow it like any read."""
        self.gate.require_scope(info.scope_hash, "unmark")
