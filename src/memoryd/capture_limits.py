"""The capture settings, read without pydantic-settings (see the package docstring for why).

The same settings are declared for the rest of memoryd as `config.CaptureSettings` (and
`config.InjectSettings` for inject's `[inject]` table), whose defaults come from
`CaptureLimits` and `InjectLimits` below; the precedence is the same as `config.load_settings`
(defaults < `config.toml` < `MEMORYD_*` environment < an explicit `--home`), reading the
`[capture]` table and `MEMORYD_CAPTURE__<FIELD>` (or a JSON `MEMORYD_CAPTURE`). A value that
does not parse is logged and replaced by its default: a hook must not fail on a config typo.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

APP_NAME = "memoryd"


class CaptureLimits(NamedTuple):
    """How much of a session is kept, and how fast the hook must be."""

    min_prompts: int = 1
    """A session with fewer user prompts is trivial and not captured."""
    min_chars: int = 200
    """A session without tool activity and with fewer characters of conversation is trivial."""
    max_body_bytes: int = 16_384
    """Cap on the memory body (UTF-8 bytes); larger summaries keep head and tail of each part."""
    max_tool_output_chars: int = 300
    """How much of a failing tool's output is quoted in the Errors section."""
    max_transcript_bytes: int = 32 * 1024 * 1024
    """Beyond this, only the first and last parts of a transcript file are read."""
    budget_ms: int = 1000
    """Wall-time budget of one capture; past it the payload is kept for `capture retry`."""
    journal_ttl_days: int = 7
    """Hook-event journals of sessions idle this long are deleted."""
    redact_high_entropy: bool = True
    """Also redact long random-looking tokens that match no known secret format."""


MINIMUMS = {
    "min_prompts": 0,
    "min_chars": 0,
    "max_body_bytes": 1024,
    "max_tool_output_chars": 20,
    "max_transcript_bytes": 65536,
    "budget_ms": 0,
    "journal_ttl_days": 1,
    "identity_tokens": 50,
}
"""The lower bounds `config.CaptureSettings` validates (a test keeps both equal)."""


class InjectLimits(NamedTuple):
    """What `memoryd inject` adds besides memories (`[inject]`, `config.InjectSettings`)."""

    identity: bool = False
    """Start a session's context with a short identity section (profile/identity.md)."""
    identity_tokens: int = 300
    """At most this many tokens of it (and never more than a third of the budget)."""


class CaptureConfig(NamedTuple):
    home: Path
    limits: CaptureLimits = CaptureLimits()
    problems: tuple[str, ...] = ()
    """Settings that were ignored, to be logged once logging is set up."""
    inject: InjectLimits = InjectLimits()
    autostart: bool = True
    """`[daemon] autostart`: hooks that find no daemon start one (`memoryd.autostart`)."""


def default_home() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def default_config_file() -> Path:
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def config_file_in_use() -> Path:
    explicit = os.environ.get("MEMORYD_CONFIG")
    return Path(explicit).expanduser() if explicit else default_config_file()


def _env(name: str) -> str | None:
    """A MEMORYD_* variable, matched case-insensitively as pydantic-settings does."""
    wanted = name.lower()
    for key, value in os.environ.items():
        if key.lower() == wanted:
            return value
    return None


def _coerce(name: str, raw: Any, default: Any, section: str = "capture") -> Any:
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{section}.{name}: {raw!r} is not a boolean")
    if isinstance(raw, bool):
        raise ValueError(f"{section}.{name}: {raw!r} is not a number")
    value = int(raw)
    if value < MINIMUMS.get(name, 0):
        raise ValueError(f"{section}.{name}: {value} is below {MINIMUMS.get(name, 0)}")
    return value


def _read_toml(path: Path, problems: list[str]) -> dict[str, Any]:
    if not path.is_file():
        return {}
    import tomllib

    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        problems.append(f"ignored config file {path}: {exc}")
        return {}


def _section(
    toml: dict[str, Any], section: str, defaults: dict[str, Any], problems: list[str]
) -> dict[str, Any]:
    """The set values of one table: `MEMORYD_<SECTION>__<FIELD>`, else a JSON
    `MEMORYD_<SECTION>`, else the TOML table (a bad one is noted and skipped)."""
    table = toml.get(section)
    from_toml: dict[str, Any] = table if isinstance(table, dict) else {}
    from_env: dict[str, Any] = {}
    blob = _env(f"MEMORYD_{section.upper()}")
    if blob:
        try:
            decoded = json.loads(blob)
            if isinstance(decoded, dict):
                from_env.update(decoded)
        except ValueError:
            problems.append(f"ignored MEMORYD_{section.upper()}: not a JSON object")
    values: dict[str, Any] = {}
    for name, default in defaults.items():
        raw = _env(f"MEMORYD_{section.upper()}__{name}")
        if raw is None:
            raw = from_env.get(name, from_toml.get(name))
        if raw is None:
            continue
        try:
            values[name] = _coerce(name, raw, default, section)
        except (TypeError, ValueError) as exc:
            problems.append(f"ignored setting: {exc}")
    return values


def load_capture_config(home: Path | str | None = None) -> CaptureConfig:
    """The data dir, the capture limits and inject's settings; never raises."""
    problems: list[str] = []
    toml = _read_toml(config_file_in_use(), problems)
    capture = _section(toml, "capture", CaptureLimits._field_defaults, problems)
    inject = _section(toml, "inject", InjectLimits._field_defaults, problems)
    daemon = _section(toml, "daemon", {"autostart": True}, problems)
    if home is None:
        home = _env("MEMORYD_HOME") or toml.get("home") or default_home()
    return CaptureConfig(
        home=Path(str(home)).expanduser().absolute(),
        limits=CaptureLimits(**capture),
        problems=tuple(problems),
        inject=InjectLimits(**inject),
        autostart=daemon.get("autostart", True),
    )
