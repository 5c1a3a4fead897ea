"""Install memoryd's daemon and periodic jobs with the OS's own scheduler.

systemd user units on Linux (when a user manager answers), launchd agents on macOS, and a
marked block in the user's crontab elsewhere. Each periodic job is one `Job` in `JOBS`; its
unit names derive from its name (`memoryd-<name>.service/.timer`, `dev.memoryd.<name>`), so
governance jobs (decay, digest, …) are added by adding rows. The OS is reached only through
a `Host` (its platform, home dir and a command runner), which tests replace.
"""

from __future__ import annotations

import os
import platform
import plistlib
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from memoryd.errors import ConfigError, StorageError
from memoryd.governance.schedule import JOBS as GOVERNANCE_JOBS
from memoryd.setup.configfiles import FileChange, make_dirs, read_text, write_atomic

Backend = Literal["systemd", "launchd", "cron"]

DAEMON_ARGS = ("serve", "--no-tcp")
DAEMON_UNIT = "memoryd.service"
DAEMON_LABEL = "dev.memoryd.serve"
CRON_BEGIN = "# >>> memoryd schedules (managed by `memoryd setup auto-install`) >>>"
CRON_END = "# <<< memoryd schedules <<<"


@dataclass(frozen=True)
class Job:
    """A periodic memoryd command, in each scheduler's terms."""

    name: str
    args: tuple[str, ...]
    description: str
    on_calendar: str  # systemd OnCalendar=
    cron: str  # the five cron fields
    launchd: Mapping[str, int]  # StartCalendarInterval


JOBS: tuple[Job, ...] = (
    Job(
        "maintenance",
        ("capture", "retry"),
        "retry captures that failed (hourly)",
        on_calendar="hourly",
        cron="0 * * * *",
        launchd={"Minute": 0},
    ),
    # The governance calendar (`memoryd.governance.schedule`); jobs not built yet are left out,
    # and so is the digest, which the daemon sends (`os_timer`).
    *(
        Job(
            job.name,
            job.args,
            f"{job.description} ({job.when})",
            on_calendar=job.on_calendar,
            cron=job.cron,
            launchd=job.launchd,
        )
        for job in GOVERNANCE_JOBS
        if job.built and job.os_timer
    ),
)


@dataclass(frozen=True)
class Completed:
    returncode: int
    output: str


Runner = Callable[[Sequence[str], str | None], Completed]


def run_command(argv: Sequence[str], input_text: str | None = None) -> Completed:
    """Run an OS tool (systemctl, launchctl, crontab); a missing tool is exit code 127."""
    try:
        done = subprocess.run(
            list(argv), input=input_text, capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Completed(127, str(exc))
    return Completed(done.returncode, done.stdout + done.stderr)


@dataclass(frozen=True)
class Host:
    """The machine as the installers see it."""

    system: str  # platform.system(): "Linux", "Darwin", …
    home: Path
    config_home: Path  # $XDG_CONFIG_HOME, where systemd looks for user units
    runner: Runner = run_command
    which: Callable[[str], str | None] = shutil.which


def current_host() -> Host:
    home = Path.home()
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    return Host(platform.system(), home, Path(xdg) if os.path.isabs(xdg) else home / ".config")


def choose_backend(host: Host) -> Backend:
    """launchd on macOS; systemd where a user manager answers; else cron."""
    if host.system == "Darwin":
        return "launchd"
    probe = ["systemctl", "--user", "show-environment"]
    if (
        host.system == "Linux"
        and host.which("systemctl")
        and host.runner(probe, None).returncode == 0
    ):
        return "systemd"
    if host.which("crontab"):
        return "cron"
    raise ConfigError(
        f"no scheduler memoryd can use on {host.system or 'this system'}"
        " (no systemd user manager, launchd or crontab)",
        hint="run `memoryd serve` yourself, e.g. from your login session",
    )


@dataclass
class SchedulePlan:
    """What install or uninstall does: commands before, file changes, commands after."""

    backend: Backend
    before: list[list[str]] = field(default_factory=list)  # failures tolerated (stop/unload)
    files: list[FileChange] = field(default_factory=list)
    remove: list[Path] = field(default_factory=list)
    after: list[list[str]] = field(default_factory=list)  # a failure is an error
    crontab: tuple[str, str] | None = None  # before, after

    @property
    def changed(self) -> bool:
        files = any(c.status != "unchanged" for c in self.files)
        cron = self.crontab is not None and self.crontab[0] != self.crontab[1]
        return files or cron or bool(self.remove)


# -- systemd ------------------------------------------------------------------------------------
def _systemd_word(word: str) -> str:
    word = word.replace("%", "%%").replace("$", "$$")
    if word and not any(ch.isspace() or ch in "\"'\\;" for ch in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _systemd_exec(argv: Sequence[str]) -> str:
    return " ".join(_systemd_word(w) for w in argv)


def systemd_units(exe: Sequence[str], home: Path | None) -> dict[str, str]:
    """File name → text of every unit memoryd installs."""
    env = f"Environment={_systemd_word(f'MEMORYD_HOME={home}')}\n" if home else ""
    units = {
        DAEMON_UNIT: (
            "[Unit]\n"
            "Description=memoryd daemon: long-term memory for AI coding agents\n"
            "\n"
            "[Service]\n"
            "Type=simple\n"
            f"ExecStart={_systemd_exec([*exe, *DAEMON_ARGS])}\n"
            f"{env}"
            "Restart=on-failure\n"
            "RestartSec=5\n"
            "\n"
            "[Install]\n"
            "WantedBy=default.target\n"
        )
    }
    for job in JOBS:
        units[f"memoryd-{job.name}.service"] = (
            "[Unit]\n"
            f"Description=memoryd {job.name}: {job.description}\n"
            "\n"
            "[Service]\n"
            "Type=oneshot\n"
            f"ExecStart={_systemd_exec([*exe, *job.args])}\n"
            f"{env}"
        )
        units[f"memoryd-{job.name}.timer"] = (
            "[Unit]\n"
            f"Description=Run memoryd {job.name} ({job.on_calendar})\n"
            "\n"
            "[Timer]\n"
            f"OnCalendar={job.on_calendar}\n"
            "Persistent=true\n"
            "\n"
            "[Install]\n"
            "WantedBy=timers.target\n"
        )
    return units


def _enabled_units() -> list[str]:
    return [DAEMON_UNIT, *(f"memoryd-{job.name}.timer" for job in JOBS)]


def _plan_systemd(
    host: Host, exe: Sequence[str], home: Path | None, uninstall: bool
) -> SchedulePlan:
    unit_dir = host.config_home / "systemd" / "user"
    plan = SchedulePlan("systemd")
    units = systemd_units(exe, home)
    ctl = ["systemctl", "--user"]
    if uninstall:
        present = [name for name in units if (unit_dir / name).exists()]
        if present:
            enabled = [n for n in _enabled_units() if n in present]
            plan.before.append([*ctl, "disable", "--now", *enabled])
            plan.remove = [unit_dir / name for name in present]
            plan.after.append([*ctl, "daemon-reload"])
        return plan
    plan.files = [FileChange(unit_dir / n, read_text(unit_dir / n), t) for n, t in units.items()]
    if any(c.status != "unchanged" for c in plan.files):
        plan.after.append([*ctl, "daemon-reload"])
    plan.after.append([*ctl, "enable", "--now", *_enabled_units()])
    daemon = plan.files[0]
    if daemon.status == "updated":  # `enable --now` leaves a running daemon on the old unit
        plan.after.append([*ctl, "try-restart", DAEMON_UNIT])
    return plan


# -- launchd ------------------------------------------------------------------------------------
def launchd_plists(exe: Sequence[str], home: Path | None) -> dict[str, str]:
    """File name → text of every launch agent memoryd installs."""
    env = {"EnvironmentVariables": {"MEMORYD_HOME": str(home)}} if home else {}
    agents: dict[str, dict[str, object]] = {
        DAEMON_LABEL: {
            "Label": DAEMON_LABEL,
            "ProgramArguments": [*exe, *DAEMON_ARGS],
            **env,
            "RunAtLoad": True,
            "KeepAlive": True,
        }
    }
    for job in JOBS:
        label = f"dev.memoryd.{job.name}"
        agents[label] = {
            "Label": label,
            "ProgramArguments": [*exe, *job.args],
            **env,
            "StartCalendarInterval": dict(job.launchd),
        }
    return {
        f"{label}.plist": plistlib.dumps(body, sort_keys=False).decode("utf-8")
        for label, body in agents.items()
    }


def _plan_launchd(
    host: Host, exe: Sequence[str], home: Path | None, uninstall: bool
) -> SchedulePlan:
    agent_dir = host.home / "Library" / "LaunchAgents"
    plan = SchedulePlan("launchd")
    plists = launchd_plists(exe, home)
    if uninstall:
        for name in plists:
            path = agent_dir / name
            if path.exists():
                plan.before.append(["launchctl", "unload", "-w", str(path)])
                plan.remove.append(path)
        return plan
    for name, text in plists.items():
        change = FileChange(agent_dir / name, read_text(agent_dir / name), text)
        plan.files.append(change)
        if change.status == "updated":
            plan.before.append(["launchctl", "unload", str(change.path)])
        if change.status != "unchanged":
            plan.after.append(["launchctl", "load", "-w", str(change.path)])
    return plan


# -- cron ---------------------------------------------------------------------------------------
def _cron_command(exe: Sequence[str], args: Sequence[str], home: Path | None) -> str:
    env = f"MEMORYD_HOME={shlex.quote(str(home))} " if home else ""
    line = f"{env}{shlex.join([*exe, *args])} >/dev/null 2>&1"
    return line.replace("%", "\\%")  # cron turns a bare % into a newline


def cron_block(exe: Sequence[str], home: Path | None) -> str:
    lines = [CRON_BEGIN, f"@reboot {_cron_command(exe, DAEMON_ARGS, home)}"]
    lines += [f"{job.cron} {_cron_command(exe, job.args, home)}" for job in JOBS]
    return "\n".join([*lines, CRON_END]) + "\n"


def without_cron_block(text: str) -> str:
    kept: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        if line.rstrip("\n") == CRON_BEGIN:
            inside = True
        elif inside and line.rstrip("\n") == CRON_END:
            inside = False
        elif not inside:
            kept.append(line)
    return "".join(kept)


def read_crontab(host: Host) -> str:
    done = host.runner(["crontab", "-l"], None)
    text = done.output
    if done.returncode == 0:
        return text if not text or text.endswith("\n") else text + "\n"
    if "no crontab" in text.lower():
        return ""
    raise ConfigError(f"`crontab -l` failed: {text.strip() or done.returncode}")


def _plan_cron(host: Host, exe: Sequence[str], home: Path | None, uninstall: bool) -> SchedulePlan:
    current = read_crontab(host)
    rest = without_cron_block(current)
    if uninstall:
        wanted = rest
    else:
        wanted = (rest if not rest or rest.endswith("\n") else rest + "\n") + cron_block(exe, home)
    return SchedulePlan("cron", crontab=(current, wanted))


def plan_schedules(
    host: Host, exe: Sequence[str], *, home: Path | None = None, uninstall: bool = False
) -> SchedulePlan:
    """What installing (or removing) memoryd's schedules would change on `host`."""
    planners = {"systemd": _plan_systemd, "launchd": _plan_launchd, "cron": _plan_cron}
    return planners[choose_backend(host)](host, exe, home, uninstall)


@dataclass
class ScheduleResult:
    backend: Backend
    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    commands: list[tuple[list[str], Completed]] = field(default_factory=list)
    crontab_backup: Path | None = None


def apply_schedules(plan: SchedulePlan, host: Host, state_dir: Path) -> ScheduleResult:
    """Carry out `plan`; the previous crontab is kept in `state_dir` before it is replaced."""
    result = ScheduleResult(plan.backend)
    for argv in plan.before:
        result.commands.append((argv, host.runner(argv, None)))
    for change in plan.files:
        if change.status != "unchanged":
            make_dirs(change.path.parent)
            write_atomic(change.path, change.after.encode("utf-8"), 0o644)
            result.written.append(change.path)
    for path in plan.remove:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"removing {path} failed: {exc.strerror or exc}") from exc
        result.removed.append(path)
    if plan.crontab is not None and plan.crontab[0] != plan.crontab[1]:
        before, after = plan.crontab
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        result.crontab_backup = state_dir / f"crontab.memoryd-backup-{stamp}"
        make_dirs(state_dir)
        write_atomic(result.crontab_backup, before.encode("utf-8"), 0o600)
        argv = ["crontab", "-"]
        done = host.runner(argv, after)
        result.commands.append((argv, done))
        if done.returncode != 0:
            raise ConfigError(f"`crontab -` failed: {done.output.strip() or done.returncode}")
    for argv in plan.after:
        done = host.runner(argv, None)
        result.commands.append((argv, done))
        if done.returncode != 0:
            raise ConfigError(
                f"`{shlex.join(argv)}` failed: {done.output.strip() or done.returncode}",
                hint="the files are in place; fix the cause and run the command again",
            )
    return result
