"""Team scope keys: a project is named by its normalised git remote, the same on every clone.

`https://GitHub.com/acme/Shop.git`, `ssh://git@github.com:22/acme/Shop` and
`git@github.com:acme/Shop.git` all give `github.com/acme/Shop`: the scheme, the user, the
port, a `.git` suffix and trailing slashes are dropped and the host is lower-cased. The path
keeps its case (some hosts treat it as case-sensitive).
"""

from __future__ import annotations

import re

from memoryd.errors import InvalidInput

_SCP = re.compile(r"^(?:[^@/:]+@)?(?P<host>[^/:]+):(?P<path>[^/].*)$")
"""scp-like `user@host:path` (no scheme; a colon before any slash)."""
_SEGMENT = re.compile(r"^[A-Za-z0-9._~+-]+$")
MAX_KEY = 300


def project_key(remote: str) -> str:
    """The team scope key of `remote` (a clone URL in any of git's forms, or a key already);
    InvalidInput naming what is wrong otherwise."""
    text = remote.strip()
    hint = "pass the project's git remote, e.g. git@github.com:acme/shop.git"
    if not text:
        raise InvalidInput("the project's remote is empty", hint=hint)
    if "://" in text:
        rest = text.split("://", 1)[1]
        authority, _, path = rest.partition("/")
        host = authority.rsplit("@", 1)[-1]
    elif (scp := _SCP.match(text)) is not None:
        host, path = scp["host"], scp["path"]
    else:
        host, _, path = text.partition("/")
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host  # a port
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[:-4].rstrip("/")
    segments = [s for s in path.split("/") if s]
    host = host.lower()
    if not host or not _SEGMENT.match(host) or not segments:
        raise InvalidInput(f"{remote!r} is not a git remote (no host and path)", hint=hint)
    for segment in segments:
        if segment in (".", "..", ".git") or not _SEGMENT.match(segment):
            raise InvalidInput(f"{remote!r} has a path part {segment!r} no remote holds", hint=hint)
    key = "/".join([host, *segments])
    if len(key) > MAX_KEY:
        raise InvalidInput(
            f"the project key is {len(key)} characters; at most {MAX_KEY}", hint=hint
        )
    return key
