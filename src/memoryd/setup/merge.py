"""Put memoryd's entries into an agent's parsed config, leaving everything else as it was.

memoryd's own entries are recognised by their command (`memoryd capture|inject` for hooks,
`memoryd mcp` for MCP servers), never by position or name, so a re-run replaces them where
they stand and a user's entries around them are kept in order. Each function returns
without change when memoryd's entries are already as wanted, which makes setup idempotent.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from memoryd.errors import Conflict, InvalidInput
from memoryd.setup.agents import HOOK_COMMAND, MCP_COMMAND

if TYPE_CHECKING:
    from tomlkit.toml_document import TOMLDocument

MEMORYD_SERVER = "memoryd"


def is_memoryd_handler(handler: object) -> bool:
    if not isinstance(handler, dict):
        return False
    return any(
        isinstance(handler.get(key), str) and HOOK_COMMAND.search(handler[key]) is not None
        for key in ("command", "bash", "powershell")
    )


def is_memoryd_server(server: object) -> bool:
    if not isinstance(server, Mapping) or not isinstance(server.get("command"), str):
        return False
    args = server.get("args")
    words = [str(a) for a in args] if isinstance(args, list) else []
    return MCP_COMMAND.search(" ".join([server["command"], *words])) is not None


def _without_memoryd(entries: list[Any], nested: bool) -> tuple[list[Any], int | None]:
    """The entries less memoryd's handlers, and where the first of them stood (else None)."""
    kept: list[Any] = []
    position: int | None = None
    for entry in entries:
        if nested and isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
            rest = [h for h in entry["hooks"] if not is_memoryd_handler(h)]
            if len(rest) == len(entry["hooks"]):
                kept.append(entry)
                continue
            if rest:  # a user's group that also held memoryd's handler: keep theirs
                kept.append({**entry, "hooks": rest})
            if position is None:
                position = len(kept)
        elif not nested and is_memoryd_handler(entry):
            if position is None:
                position = len(kept)
        else:
            kept.append(entry)
    return kept, position


def merge_hooks(
    doc: dict[str, Any],
    wanted: Mapping[str, list[dict[str, Any]]],
    *,
    nested: bool,
    top: Mapping[str, Any],
    where: str,
) -> dict[str, Any]:
    """`doc` with memoryd's hook entries replaced by `wanted` (event → entries)."""
    new = copy.deepcopy(doc)
    for key, value in top.items():
        new.setdefault(key, value)
    hooks = new.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InvalidInput(f'{where}: "hooks" is not a JSON object', hint=_FIX)
    for event in [*hooks, *(e for e in wanted if e not in hooks)]:
        entries = hooks.get(event, [])
        if not isinstance(entries, list):
            raise InvalidInput(f'{where}: "hooks.{event}" is not a JSON list', hint=_FIX)
        kept, position = _without_memoryd(entries, nested)
        add = copy.deepcopy(wanted.get(event, []))
        if position is None and not add:
            continue
        at = len(kept) if position is None else position
        merged = kept[:at] + add + kept[at:]
        if merged:
            hooks[event] = merged
        else:
            del hooks[event]
    return new


def _servers_of(doc: Mapping[str, Any], key: str, where: str) -> Any:
    servers = doc.get(key)
    if servers is not None and not isinstance(servers, dict):
        raise InvalidInput(f'{where}: "{key}" is not a table of servers', hint=_FIX)
    return servers


def _check_name_free(servers: Mapping[str, Any], where: str) -> None:
    if MEMORYD_SERVER in servers:
        raise Conflict(
            f'{where}: an MCP server named "memoryd" is configured and does not run `memoryd mcp`',
            hint="rename or remove that entry, then run setup again",
        )


def merge_mcp_json(
    doc: dict[str, Any],
    entry: Mapping[str, Any],
    *,
    where: str,
    drop_env: Sequence[str] = (),
) -> dict[str, Any]:
    """`doc` with every `memoryd mcp` server updated to `entry` (its other keys kept, less
    the `drop_env` variables), or a new "memoryd" server when there is none."""
    new = copy.deepcopy(doc)
    servers = _servers_of(new, "mcpServers", where)
    if servers is None:
        servers = new["mcpServers"] = {}
    ours = [name for name, server in servers.items() if is_memoryd_server(server)]
    if not ours:
        _check_name_free(servers, where)
        servers[MEMORYD_SERVER] = copy.deepcopy(dict(entry))
    for name in ours:
        server = servers[name]
        for key, value in entry.items():
            if key == "env" and isinstance(server.get("env"), dict):
                server["env"].update(value)
            else:
                server[key] = copy.deepcopy(value)
        _drop_env(server, drop_env)
    return new


def merge_mcp_toml(
    doc: TOMLDocument, entry: Mapping[str, Any], *, where: str, drop_env: Sequence[str] = ()
) -> None:
    """Codex's `[mcp_servers.*]`, edited in place so comments and layout survive; a value
    is assigned only when it differs, so an unchanged entry leaves the text byte-identical.
    The `drop_env` variables are removed from memoryd's servers."""
    import tomlkit
    from tomlkit.items import InlineTable

    servers = _servers_of(doc, "mcp_servers", where)
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc["mcp_servers"] = servers
    ours = [name for name, server in servers.items() if is_memoryd_server(server)]
    if not ours:
        _check_name_free(servers, where)
        table = tomlkit.inline_table() if isinstance(servers, InlineTable) else tomlkit.table()
        for key, value in entry.items():
            table[key] = _inline(value) if isinstance(value, dict) else value
        servers[MEMORYD_SERVER] = table
    for name in ours:
        server = servers[name]
        for key, value in entry.items():
            if key == "env" and isinstance(server.get("env"), dict):
                for var, text in value.items():
                    if server["env"].get(var) != text:
                        server["env"][var] = text
            elif _plain(server.get(key)) != value:
                server[key] = _inline(value) if isinstance(value, dict) else value
        _drop_env(server, drop_env)


def _drop_env(server: Any, names: Sequence[str]) -> None:
    """Remove `names` from a server's `env` (a dict or a TOML table), and `env` once empty."""
    env = server.get("env")
    if not names or not isinstance(env, MutableMapping):
        return
    for name in names:
        if name in env:
            del env[name]
    if not env:
        del server["env"]


def _inline(value: Mapping[str, Any]) -> Any:
    import tomlkit

    table = tomlkit.inline_table()
    table.update(value)
    return table


def _plain(value: Any) -> Any:
    """A tomlkit item as plain Python, for comparing with what memoryd wants."""
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


_FIX = "fix the file by hand (or move it away) and run setup again; nothing was written"
