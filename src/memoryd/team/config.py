"""The team server's own settings, `<home>/team.toml`, written by `memoryd team init`.

It holds what only the team server reads: where it listens, its TLS pair, its team database,
and its graph, always on the FalkorDB engine (`[team] falkordb_url`, `graph_name`), which
`memoryd team serve` lays over the settings every daemon reads.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memoryd.errors import ConfigError
from memoryd.team.store import TeamStore

if TYPE_CHECKING:
    from memoryd.config import Settings

TEAM_FILE = "team.toml"
PROJECTS_DIR = "team-projects"


class TeamConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", description="the address the TLS listener binds")
    port: int = Field(default=8443, ge=0, le=65535, description="0: any free port")
    cert: Path = Field(description="the TLS certificate (PEM)")
    key: Path = Field(description="the TLS private key (PEM, 0600)")
    database: Path = Field(description="users, token digests, grants (SQLite, 0600)")
    secret: Path = Field(description="the key of the token digests (0600)")
    falkordb_url: str | None = Field(
        default=None,
        description="the FalkorDB server; default: the local one `memoryd setup falkordb` starts",
    )
    graph_name: str = Field(default="team", min_length=1, description="the team's one graph")
    replica: bool = Field(
        default=True,
        description="run a FalkorDB replica for users' Cypher and the graph page (it needs the"
        " primary on a TCP port; `team status` says when it cannot run)",
    )
    replica_max_lag_s: float = Field(
        default=2.0,
        gt=0,
        description="past this many seconds behind the primary, graph reads go to the primary",
    )

    def graph_settings(self) -> dict[str, str | None]:
        """What `team serve` sets in `Settings.graph`: the FalkorDB engine, url and graph."""
        return {"engine": "falkordb", "url": self.falkordb_url, "name": self.graph_name}


def with_team_graph(settings: Settings, team: TeamConfig) -> Settings:
    """The daemon settings with the team's graph (FalkorDB) laid over them."""
    graph = settings.graph.model_copy(update=team.graph_settings())
    return settings.model_copy(update={"graph": graph})


def team_file(home: Path) -> Path:
    return home / TEAM_FILE


def load_team(home: Path) -> TeamConfig:
    path = team_file(home)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{home} is not a team data dir (no {TEAM_FILE})",
            hint=f"run `memoryd team init --home {home}`",
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", hint=f"fix or remove {path}") from exc
    try:
        return TeamConfig.model_validate(data.get("team", {}))
    except ValidationError as exc:
        raise ConfigError(f"{path}: {exc}", hint=f"fix the [team] table of {path}") from exc


def open_store(config: TeamConfig) -> TeamStore:
    return TeamStore(config.database, config.secret)


def init_team(
    home: Path,
    now: datetime,
    *,
    host: str,
    port: int,
    falkordb_url: str | None,
    graph_name: str = "team",
) -> TeamConfig:
    """Make `home` a team data dir: team.toml (on the FalkorDB engine), a self-signed TLS
    pair, the token key and the team database. Refuses a dir already made."""
    if team_file(home).exists():
        raise ConfigError(
            f"{home} is already a team data dir", hint=f"edit {team_file(home)} instead"
        )
    if home.exists() and any(home.iterdir()):
        raise ConfigError(
            f"{home} is not empty: a team server needs a data dir of its own",
            hint="pass a new or empty --home for the team server",
        )
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    tls_dir = home / "tls"
    tls_dir.mkdir(exist_ok=True, mode=0o700)
    config = TeamConfig(
        host=host,
        port=port,
        cert=tls_dir / "cert.pem",
        key=tls_dir / "key.pem",
        database=home / "team.db",
        secret=home / "team.key",
        falkordb_url=falkordb_url,
        graph_name=graph_name,
    )
    from memoryd.team.tls import self_signed  # cryptography: only when a pair is made

    self_signed(config.cert, config.key, [host, "localhost"], now)
    fd = os.open(config.secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(secrets.token_bytes(32))
    lines = ["[team]", f"host = {toml_string(host)}", f"port = {port}"]
    names = ("cert", "key", "database", "secret", "graph_name")
    lines += [f"{name} = {toml_string(str(getattr(config, name)))}" for name in names]
    if falkordb_url:
        lines.append(f"falkordb_url = {toml_string(falkordb_url)}")
    team_file(home).write_text("\n".join(lines) + "\n", encoding="utf-8")
    open_store(config)  # creates the database, 0600
    return config


def toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
