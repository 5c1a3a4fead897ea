"""`memoryd share SLUG...` / `memoryd share --scope PATH [--dry-run]`: copy personal memories
to the team, each with the supersedes chain it is part of.

Nothing goes before everything was checked: a memory of a sensitive scope (its own flag, its
scope's marker or `scope.json`) refuses the whole share, and so does one whose project is not a
team project the user may write. The memories go oldest first, each naming the team copies of
the ones it supersedes, so the chain holds on the server. Each write's request id is made from
the user and the personal slug, so sharing again lands nothing twice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from memoryd.errors import InvalidInput, MemorydError, PolicyDenied, StorageError
from memoryd.memfile import scope_file, scope_is_sensitive
from memoryd.models import Memory
from memoryd.protocol import MemoryAPI
from memoryd.team_member.member import TIMEOUT_S, Membership, key_of_path, message

SCOPE_PAGE = 1000


class SensitiveNotShared(PolicyDenied):
    """A memory of a sensitive scope was asked to leave the machine."""

    code = "sensitive_not_shared"


@dataclass
class Shared:
    """What a share sent (or, dry, would send): personal slug → project, team slug."""

    rows: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    """(personal slug, title, project key, team slug or None on a dry run)"""


def pick(svc: MemoryAPI, slugs: list[str], scope: Path | None) -> list[Memory]:
    """The memories asked for, with every memory of their supersedes chains, oldest first."""
    wanted: list[str] = list(slugs)
    if scope is not None:
        offset = 0
        while page := svc.list_memories(scope=scope, limit=SCOPE_PAGE, offset=offset):
            wanted += [row.slug for row in page]
            offset += len(page)
    if not wanted:
        raise InvalidInput("nothing to share", hint="name memories by slug, or pass --scope PATH")
    found: dict[str, Memory] = {}
    todo = list(dict.fromkeys(wanted))
    while todo:
        slug = todo.pop()
        if slug in found:
            continue
        try:
            found[slug] = svc.get(slug)
        except PolicyDenied as exc:  # the gate keeps sensitive memories from reads
            raise SensitiveNotShared(
                f"memory {slug} is in a sensitive scope: it never leaves this machine",
                hint="share memories of other projects; nothing was sent",
            ) from exc
        for row in svc.supersedes_chain(slug):
            todo += [s for s in (row.newer, row.older) if s not in found]
    return sorted(found.values(), key=lambda m: (m.meta.created_at, m.meta.slug))


def _project(home: Path, member: Membership, memory: Memory) -> str:
    scope_hash = memory.meta.scope_hash
    if memory.sensitive or scope_is_sensitive(home, scope_hash):
        raise SensitiveNotShared(
            f"memory {memory.meta.slug} is in a sensitive scope: it never leaves this machine",
            hint="share memories of other projects; nothing was sent",
        )
    try:
        path = str(_scope_path(home, scope_hash))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(
            f"memory {memory.meta.slug}: its scope {scope_hash} has no project path here",
            hint="nothing was sent",
        ) from exc
    key = key_of_path(path)
    if key is None:  # no remote, or marked sensitive since
        from memoryd.scope import marked_sensitive

        if marked_sensitive(Path(path)):
            raise SensitiveNotShared(
                f"memory {memory.meta.slug} is in a sensitive scope ({path}): it never leaves"
                " this machine",
                hint="share memories of other projects; nothing was sent",
            )
        raise InvalidInput(
            f"memory {memory.meta.slug}: {path} has no git remote, so it is no team project",
            hint="nothing was sent",
        )
    if member.roles.get(key) not in ("write", "admin"):
        raise PolicyDenied(
            f"user {member.user!r} may not write in {key} on {member.url}",
            hint=f"a team admin runs `memoryd team grant {member.user} {key} --role write`",
        )
    return key


def _scope_path(home: Path, scope_hash: str) -> Path:
    import json

    return Path(json.loads(scope_file(home, scope_hash).read_text(encoding="utf-8"))["path"])


def plan(
    svc: MemoryAPI, member: Membership, slugs: list[str], scope: Path | None
) -> list[tuple[Memory, str]]:
    """Every memory a share would send, oldest first, with its project key; refused whole
    (nothing sent) when one may not leave or its project is not one the user may write."""
    if scope is not None and key_of_path(str(scope)) is None:
        from memoryd.scope import resolve_scope

        if resolve_scope(scope).sensitive or scope_is_sensitive(
            member.home, svc.scope_hash_of(scope) or ""
        ):
            raise SensitiveNotShared(
                f"{scope} is a sensitive scope: it never leaves this machine",
                hint="share another project; nothing was sent",
            )
    memories = pick(svc, slugs, scope)
    return [(memory, _project(member.home, member, memory)) for memory in memories]


def share(
    svc: MemoryAPI,
    member: Membership,
    slugs: list[str],
    scope: Path | None,
    *,
    dry_run: bool = False,
) -> Shared:
    """Check every memory, then (unless `dry_run`) send them, oldest first."""
    planned = plan(svc, member, slugs, scope)
    if dry_run:
        return Shared([(m.meta.slug, m.meta.title, key, None) for m, key in planned])
    return send(member, planned)


def send(member: Membership, planned: list[tuple[Memory, str]]) -> Shared:
    """Send what `plan` chose, oldest first, each naming the team copies it supersedes."""
    report = Shared()
    copies: dict[str, str] = {}
    with httpx.Client(
        base_url=member.url, headers=member.headers(), verify=member.verify(), timeout=TIMEOUT_S
    ) as client:
        for memory, key in planned:
            body = _body(memory, key, [copies[s] for s in memory.meta.supersedes if s in copies])
            request_id = hashlib.sha256(f"{member.user}\n{memory.meta.slug}".encode()).hexdigest()
            try:
                answer = client.post(
                    "/v1/memories", json=body, headers={"X-Memoryd-Request-Id": request_id[:32]}
                )
            except httpx.HTTPError as exc:
                raise StorageError(
                    f"the team server {member.url} did not answer: {exc!r}",
                    hint=f"{len(copies)} shared before it stopped; share again when it is back"
                    " (what went is not sent twice)",
                ) from exc
            if answer.status_code not in (200, 201):
                raise StorageError(
                    f"the team server refused {memory.meta.slug}: {message(answer.content)}",
                    hint=f"{len(copies)} shared before it",
                )
            copies[memory.meta.slug] = str(answer.json()["meta"]["slug"])
            report.rows.append((memory.meta.slug, memory.meta.title, key, copies[memory.meta.slug]))
    return report


def not_shared(slug: str, exc: MemorydError) -> StorageError:
    """A promotion made, whose share to the team failed: the memory stays personal."""
    return StorageError(
        f"promoted as {slug}, which stays personal: the share to the team failed: {exc.message}",
        hint=f"share it once that is solved: `memoryd share {slug}`",
    )


def _body(memory: Memory, key: str, supersedes: list[str]) -> dict[str, Any]:
    meta = memory.meta
    return {
        "type": meta.type.value,
        "title": meta.title,
        "body": memory.body,
        "scope": key,
        "source": meta.source,
        "tags": meta.tags,
        "triggers": meta.triggers,
        "category": meta.category,
        "created_at": meta.created_at.isoformat(),
        "supersedes": supersedes,
        "allow_duplicate": True,
    }
