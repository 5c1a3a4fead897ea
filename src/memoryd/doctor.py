"""`memoryd doctor`: every check says what is wrong and how to fix it."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from memoryd import __version__
from memoryd.config import Settings
from memoryd.errors import MemorydError, StorageError
from memoryd.models import DoctorCheck

if TYPE_CHECKING:
    from datetime import datetime

    from memoryd.search.index import CommitWait
    from memoryd.service import MemoryService

REQUIRED_MODULES = ("tantivy", "jieba", "yaml", "pydantic", "typer")
EXTRA_OF = {"ladybug": "ladybug", "anthropic": "llm"}
"""A module the config asks for → the optional extra (pyproject.toml) that installs it."""


def _install_checks(settings: Settings) -> list[DoctorCheck]:
    checks = [
        DoctorCheck(
            name="python",
            ok=sys.version_info >= (3, 11),
            detail=f"Python {sys.version.split()[0]}, memoryd {__version__}",
            fix="install Python 3.11 or newer",
        )
    ]
    wanted = [*REQUIRED_MODULES, settings.graph.engine]
    if settings.llm.provider == "anthropic":
        wanted.append("anthropic")
    missing = [m for m in wanted if not importlib.util.find_spec(m)]
    extras = sorted({EXTRA_OF[m] for m in missing if m in EXTRA_OF})
    plain = [m for m in missing if m not in EXTRA_OF]
    commands = [f"pip install {' '.join(plain)}"] if plain else []
    commands += [f"pip install 'memoryd[{','.join(extras)}]'"] if extras else []
    checks.append(
        DoctorCheck(
            name="packages",
            ok=not missing,
            detail="all required packages import"
            if not missing
            else f"missing: {', '.join(missing)}",
            fix="; ".join(commands),
        )
    )
    return checks


def _data_dir_checks(settings: Settings) -> list[DoctorCheck]:
    from memoryd.wiring import ensure_home

    home = settings.home
    try:
        ensure_home(home)
    except MemorydError as exc:
        return [DoctorCheck(name="data dir", ok=False, detail=exc.message, fix=exc.hint)]
    free_mb = shutil.disk_usage(home).free // (1024 * 1024)
    return [
        DoctorCheck(name="data dir", ok=True, detail=f"{home} is writable"),
        DoctorCheck(
            name="disk space",
            ok=free_mb >= 100,
            detail=f"{free_mb} MB free",
            fix="free disk space: writes fail on a full disk",
        ),
    ]


def permissions_check(home: Path, *, fix: bool = False) -> DoctorCheck:
    """Files 0600 and directories 0700 in the data dir (see `memoryd.private`); with `fix`,
    loosened modes are tightened first and the check says how many."""
    from memoryd.private import loose_entries, tighten

    fixed = tighten(home) if fix else []
    loose = loose_entries(home)
    if loose:
        shown = ", ".join(f"{path} ({mode:04o})" for path, mode in loose[:5])
        more = f" and {len(loose) - 5} more" if len(loose) > 5 else ""
        return DoctorCheck(
            name="permissions",
            ok=False,
            detail=f"{_paths(len(loose))} other users may read or enter: {shown}{more}",
            fix="run `memoryd doctor --fix` (files become 0600, directories 0700)"
            if not fix
            else "this user may not change them: `chmod go-rwx` them as their owner",
        )
    detail = "every file is 0600 and every directory 0700 (or stricter)"
    if fixed:
        detail = f"tightened {_paths(len(fixed))}; {detail}"
    return DoctorCheck(name="permissions", ok=True, detail=detail)


def _paths(count: int) -> str:
    return f"{count} path" if count == 1 else f"{count} paths"


def _store_checks(settings: Settings) -> list[DoctorCheck]:
    from memoryd.wiring import open_service

    try:
        svc = open_service(settings.model_copy(update={"lock_timeout_s": 0.5}), actor="doctor")
    except MemorydError as exc:
        return [DoctorCheck(name="stores", ok=False, detail=exc.message, fix=exc.hint)]
    with svc:
        return service_checks(svc, settings)


def service_checks(svc: MemoryService, settings: Settings) -> list[DoctorCheck]:
    """The checks on open stores; the daemon runs them on its own service (`/v1/doctor`)."""
    from memoryd.governance.store import GovernanceStore
    from memoryd.graph.kuzu_store import SCHEMA_VERSION

    if settings.graph.engine == "falkordb":
        from memoryd.graph.falkordb_store import SCHEMA_VERSION

    checks: list[DoctorCheck] = []
    graph_version = svc.graph.schema_version()
    checks.append(
        DoctorCheck(
            name="graph",
            ok=graph_version == SCHEMA_VERSION,
            detail=f"{settings.graph.engine} schema {graph_version}"
            f" (expected {SCHEMA_VERSION}),"
            f" {svc.graph.count_memories()} memories",
            fix="run `memoryd reindex`",
        )
    )
    gov_version = svc.governance.schema_version()
    checks.append(
        DoctorCheck(
            name="governance db",
            ok=gov_version == GovernanceStore.LATEST_VERSION,
            detail=f"schema {gov_version} (expected {GovernanceStore.LATEST_VERSION})",
            fix="upgrade memoryd",
        )
    )
    broken: list[str] = []
    copies: list[tuple[Path, Path, str]] = []
    memories = list(svc.iter_vault(broken.append, on_copy=lambda *found: copies.append(found)))
    broken = [b for b in broken if not b.startswith("note:")]
    checks.append(
        DoctorCheck(
            name="vault",
            ok=not broken,
            detail="every memory file parses" if not broken else "; ".join(broken[:5]),
            fix="fix or move the broken files, then run `memoryd reindex`",
        )
    )
    checks.append(dura_check(broken))
    if copies:
        # Not a reindex problem: reindex skips copies, so it cannot make this go away.
        checks.append(
            DoctorCheck(
                name="copied files",
                ok=False,
                detail="; ".join(
                    f"{copy} holds slug {slug}, which {original} holds"
                    for copy, original, slug in copies[:5]
                )
                + (f" (and {len(copies) - 5} more)" if len(copies) > 5 else ""),
                fix="delete each copy (memoryd ignores it), or give it its own slug and a"
                " file name to match, then run `memoryd reindex`",
            )
        )
    sealed_check, sealed_slugs = encrypted_check(svc)
    checks.append(sealed_check)
    checks.append(commit_check(svc.index.commit_wait(), svc.index.directory))
    checks.append(
        consistency_check(
            svc,
            {m.meta.slug for m in memories if m.meta.forgotten_at is None}  # decay's: vault only
            | sealed_slugs,
        )
    )
    queued = svc.enrichment_counts()
    llm_note = "" if svc.llm is not None else "; no LLM configured, so no summaries"
    checks.append(
        DoctorCheck(
            name="enrichment",
            ok=not queued["failed"],
            detail=f"captured sessions: {queued['pending']} pending, {queued['done']} done,"
            f" {queued['failed']} failed{llm_note}",
            fix="check the llm settings and the daemon log; a failed session is enriched"
            " again when it is captured again",
        )
    )
    judges = svc.judge_counts()
    skipped, last = svc.judging_skipped
    checks.append(
        DoctorCheck(
            name="supersede judging",
            ok=not judges["failed"] and not skipped,
            detail=f"memories owed the LLM judge: {judges['pending']} pending,"
            f" {judges['done']} done, {judges['failed']} failed"
            + (
                f"; {skipped} writes partly left unjudged since start (last {last})"
                if skipped
                else ""
            ),
            fix="check the llm settings and the daemon log; `memoryd supersede judge SLUG`"
            " judges a memory again",
        )
    )
    checks.append(vectors_check(svc, settings.recall.vectors))
    verification = svc.audit_verify()
    checks.append(
        DoctorCheck(
            name="audit chain",
            ok=verification.ok,
            detail=f"{verification.lines} lines verify"
            if verification.ok
            else str(verification.problem),
            fix="the audit log was changed outside memoryd; restore audit/ from a backup",
        )
    )
    return checks


def consistency_check(svc: MemoryService, vault_slugs: set[str]) -> DoctorCheck:
    """Vault, graph and search index hold the same memories. An index that cannot commit
    the documents waiting for it fails the check with its error (`commit_check` says more)."""
    try:
        only_vault, only_graph, index_diff = svc.consistency(vault_slugs)
    except StorageError as exc:
        return DoctorCheck(
            name="index consistency",
            ok=False,
            detail=exc.message,
            fix=exc.hint or "see the search index commits check",
        )
    problems = []
    if only_vault:
        problems.append(f"{len(only_vault)} files not in the graph (e.g. {min(only_vault)})")
    if only_graph:
        problems.append(f"{len(only_graph)} graph memories without a file (e.g. {min(only_graph)})")
    if index_diff:
        problems.append(f"search index differs from the graph on {len(index_diff)} memories")
    return DoctorCheck(
        name="index consistency",
        ok=not problems,
        detail="vault, graph and search index agree" if not problems else "; ".join(problems),
        fix="run `memoryd reindex`",
    )


def commit_check(wait: CommitWait, directory: Path) -> DoctorCheck:
    """The memories waiting for the search index's next commit, and its failed tries: a
    record is searchable once the index commits it (its timer retries a failed commit)."""
    if wait.error is None:
        detail = (
            f"{wait.documents} memories wait for the next commit (since {_at(wait.since)})"
            if wait.documents
            else "no memory waits for a commit"
        )
        return DoctorCheck(name="search index commits", ok=True, detail=detail)
    return DoctorCheck(
        name="search index commits",
        ok=False,
        detail=f"{wait.documents} memories wait for a commit since {_at(wait.since)}, not"
        f" searchable yet: {wait.failures} tries failed since {_at(wait.failing_since)}, the"
        f" first: {wait.first_error}"
        + (f"; the last: {wait.error}" if wait.error != wait.first_error else "")
        + f"; the next try is at {_at(wait.retry_at)}",
        fix=f"free disk space or restore write access to {directory}; the daemon commits them"
        " on its next try (their writes are journalled: a restart indexes them again)",
    )


def _at(moment: datetime | None) -> str:
    return "?" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def encrypted_check(svc: MemoryService) -> tuple[DoctorCheck, set[str]]:
    """Every `.md.enc` file's header (magic, version, length), checked without any key; and
    the slugs of the sealed memories the graph should hold (their skeletons)."""
    from memoryd.sensitive.envelope import read_header
    from memoryd.vault import FORGOTTEN_DIR, file_slug

    bad: list[str] = []
    slugs: set[str] = set()
    count = 0
    for path in svc.vault.iter_encrypted():
        count += 1
        try:
            read_header(path.read_bytes(), path)
        except (MemorydError, OSError) as exc:
            bad.append(str(exc))
            continue
        if path.parent.name != FORGOTTEN_DIR:
            slugs.add(file_slug(path))
    detail = f"{count} encrypted files have a valid header" if not bad else "; ".join(bad[:5])
    check = DoctorCheck(
        name="encrypted files",
        ok=not bad,
        detail=detail + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""),
        fix="restore the damaged .md.enc files from a backup (they cannot be repaired)",
    )
    return check, slugs


def dura_check(broken: list[str]) -> DoctorCheck:
    """Memory files whose `dura_score` does not parse (edited by hand): named one by one,
    with what a valid score looks like. Such a file is skipped by recall and reindex."""
    bad = [line.removeprefix("skipped ") for line in broken if "'dura_score" in line]
    return DoctorCheck(
        name="dura scores",
        ok=not bad,
        detail="every dura_score parses"
        if not bad
        else "; ".join(bad[:5]) + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""),
        fix="give dura_score four numbers D, U, R, A from 0 to 1 and `by: heuristic-v1` or"
        " `by: llm:<model>`, or delete the dura_score block and run"
        " `memoryd analyze-session SLUG` to score the session again",
    )


def vectors_check(svc: MemoryService, mode: str) -> DoctorCheck:
    """The optional vector stage: off, not installed (a failure only when asked for with
    `recall.vectors = on`), or its store against the search index."""
    if svc.vectors is None:
        reason = svc.vectors_absent or "not opened"
        return DoctorCheck(
            name="vectors",
            ok=mode != "on",
            detail=f"recall runs without the vector stage: {reason}",
            fix="pip install 'memoryd[vectors]', or set recall.vectors = off"
            if mode == "on"
            else "",
        )
    from memoryd.recall.vectors import expected, indexed_docs

    store = svc.vectors.store
    health = store.health(expected(indexed_docs(svc.index), store.model))
    problems = [
        f"{len(found)} {what} (e.g. {found[0]})"
        for what, found in (
            ("memories not embedded yet", health.missing),
            ("memories embedded from older text", health.stale),
            ("vectors of memories no longer indexed", health.orphans),
        )
        if found
    ]
    detail = (
        f"{health.model} ({health.dim} dimensions): {health.memories} memories,"
        f" {health.passages} passages"
    )
    return DoctorCheck(
        name="vectors",
        ok=not problems,
        detail=detail if not problems else f"{detail}; {'; '.join(problems)}",
        fix="start `memoryd serve` (its background worker embeds them) or run `memoryd reindex`",
    )


def run_checks(
    settings: Settings, service: MemoryService | None = None, *, fix: bool = False
) -> list[DoctorCheck]:
    """Every check; with `service` (the daemon's) the stores are checked without reopening.
    `fix` repairs what can be repaired without a decision (file modes)."""
    checks = _install_checks(settings) + _data_dir_checks(settings)
    if any(c.name == "data dir" and c.ok for c in checks):
        checks.append(permissions_check(settings.home, fix=fix))
    if all(c.ok for c in checks if c.name in ("packages", "data dir")):
        if service is None:
            checks += _store_checks(settings)
        else:
            checks += service_checks(service, settings)
    return checks
