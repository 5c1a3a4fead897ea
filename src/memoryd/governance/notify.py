"""`memoryd digest --notify`: tell the person the digest is ready.

Two channels, each reported on its own (sent, skipped with the reason, or failed with what to
fix):
* the desktop: `notify-send` (Linux) or `osascript` (macOS), found on PATH; none found is a
  skip with a note, not a failure (a headless server has no desktop);
* e-mail through the SMTP server of `[digest.smtp]` (stdlib `smtplib`), the whole digest as
  plain text. The password is never in the config file: it comes from the OS keyring
  (service `memoryd`, user `smtp:<username>@<host>`) or the environment variable
  `digest.smtp.password_env` names.

The weekly schedule runs this in the daemon; a failure there is recorded and retried, so
nothing here raises for a channel that fails: the caller reads `NotifyReport.failed`.
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import subprocess
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from memoryd.config import DigestSettings, SmtpSettings
from memoryd.errors import ConfigError
from memoryd.governance.digest import Digest, plain_text, subject

if TYPE_CHECKING:  # smtplib and email's policies load only to send a digest by mail
    import smtplib
    from email.message import EmailMessage

logger = logging.getLogger(__name__)

KEYRING_SERVICE = "memoryd"
DESKTOP_TIMEOUT_S = 10.0


class ChannelOutcome(BaseModel):
    channel: Literal["desktop", "email"]
    status: Literal["sent", "skipped", "failed"]
    note: str


class NotifyReport(BaseModel):
    outcomes: list[ChannelOutcome] = Field(default_factory=list)

    @property
    def failed(self) -> list[ChannelOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def summary(self) -> str:
        return "; ".join(f"{o.channel} {o.status}: {o.note}" for o in self.outcomes)


def keyring_user(smtp: SmtpSettings) -> str:
    return f"smtp:{smtp.username}@{smtp.host}"


# -- desktop ----------------------------------------------------------------------------------
def desktop_command(title: str, message: str) -> list[str] | None:
    """The command that shows a desktop notification here, or None when there is none."""
    if found := shutil.which("notify-send"):
        return [found, "--app-name=memoryd", title, message]
    if found := shutil.which("osascript"):
        quoted = message.replace("\\", "\\\\").replace('"', '\\"')
        heading = title.replace("\\", "\\\\").replace('"', '\\"')
        return [found, "-e", f'display notification "{quoted}" with title "{heading}"']
    return None


def notify_desktop(digest: Digest) -> ChannelOutcome:
    """One short notification: the counts, and the command that shows the rest."""
    message = subject(digest).removeprefix("memoryd digest: ") + " (memoryd digest --tui)"
    command = desktop_command("memoryd digest", message)
    if command is None:
        return ChannelOutcome(
            channel="desktop",
            status="skipped",
            note="no desktop notifier here: neither notify-send nor osascript is on PATH",
        )
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=DESKTOP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ChannelOutcome(channel="desktop", status="failed", note=f"{command[0]}: {exc}")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[:300]
        return ChannelOutcome(
            channel="desktop",
            status="failed",
            note=f"{command[0]} exited {done.returncode}" + (f": {said}" if said else ""),
        )
    return ChannelOutcome(channel="desktop", status="sent", note=command[0])


# -- e-mail -----------------------------------------------------------------------------------
def smtp_password(smtp: SmtpSettings) -> str | None:
    """The login password: from `digest.smtp.password_env`'s variable, else the OS keyring;
    None when no `username` is set (no login). A username without a password is a
    ConfigError naming where to put it."""
    if smtp.username is None:
        return None
    if smtp.password_env:
        value = os.environ.get(smtp.password_env, "")
        if not value:
            raise ConfigError(
                f"digest.smtp.password_env names ${smtp.password_env}, which is not set",
                hint=f"export {smtp.password_env}=… for the daemon and the CLI, or drop"
                " password_env to use the OS keyring",
            )
        return value
    import keyring
    import keyring.errors

    try:
        value = keyring.get_password(KEYRING_SERVICE, keyring_user(smtp)) or ""
    except keyring.errors.KeyringError as exc:
        logger.debug("no keyring to read the SMTP password from: %s", exc)
        value = ""
    if not value:
        raise ConfigError(
            f"no SMTP password for digest.smtp.username {smtp.username!r} at"
            f" digest.smtp.host {smtp.host!r}",
            hint=f"`keyring set {KEYRING_SERVICE} {keyring_user(smtp)}`, or set"
            " digest.smtp.password_env to the name of an environment variable that holds it",
        )
    return value


def message(digest: Digest, smtp: SmtpSettings) -> EmailMessage:
    # RFC 5322 allows lines up to 998 characters; at 78 Python folds the subject right after
    # `Subject:` and some readers show it with a leading space.
    from email import policy
    from email.message import EmailMessage

    mail = EmailMessage(policy=policy.SMTP.clone(max_line_length=200))
    mail["Subject"] = subject(digest)
    mail["From"] = smtp.from_addr
    mail["To"] = ", ".join(smtp.to)
    mail.set_content(plain_text(digest))
    return mail


def _connect(smtp: SmtpSettings) -> smtplib.SMTP:
    import smtplib

    port = smtp.effective_port
    if smtp.security == "ssl":
        return smtplib.SMTP_SSL(
            smtp.host, port, timeout=smtp.timeout_s, context=ssl.create_default_context()
        )
    client = smtplib.SMTP(smtp.host, port, timeout=smtp.timeout_s)
    if smtp.security == "starttls":
        try:
            client.starttls(context=ssl.create_default_context())
        except BaseException:
            client.close()
            raise
    return client


def send_mail(digest: Digest, smtp: SmtpSettings) -> ChannelOutcome:
    """Send the digest; a failure comes back as an outcome naming the config key to check."""
    import smtplib

    where = f"digest.smtp.host {smtp.host}:{smtp.effective_port}"
    try:
        password = smtp_password(smtp)
    except ConfigError as exc:
        return ChannelOutcome(channel="email", status="failed", note=f"{exc.message} ({exc.hint})")
    try:
        with _connect(smtp) as client:
            if smtp.username is not None and password is not None:
                client.login(smtp.username, password)
            refused = client.send_message(message(digest, smtp))
    except smtplib.SMTPNotSupportedError as exc:
        note = f"{where} does not offer it ({exc}): check digest.smtp.security"
    except smtplib.SMTPAuthenticationError as exc:
        note = f"{where} refused the login of digest.smtp.username {smtp.username!r}: {exc}"
    except smtplib.SMTPRecipientsRefused as exc:
        note = f"{where} refused every address of digest.smtp.to: {sorted(exc.recipients)}"
    except smtplib.SMTPSenderRefused as exc:
        note = f"{where} refused digest.smtp.from {smtp.from_addr!r}: {exc.smtp_error!r}"
    except ssl.SSLError as exc:
        note = f"TLS with {where} failed ({exc}): check digest.smtp.security and port"
    except (OSError, smtplib.SMTPException) as exc:
        note = f"cannot send through {where}: {exc}"
    else:
        sent = [to for to in smtp.to if to not in refused]
        note = f"to {', '.join(sent)} via {smtp.host}"
        if refused:
            note += f" (refused: {', '.join(sorted(refused))})"
        return ChannelOutcome(channel="email", status="sent", note=note)
    return ChannelOutcome(channel="email", status="failed", note=note)


# -- both ---------------------------------------------------------------------------------------
def notify(digest: Digest, settings: DigestSettings) -> NotifyReport:
    """Every configured channel, each reported; none raises."""
    report = NotifyReport()
    if settings.desktop:
        report.outcomes.append(notify_desktop(digest))
    else:
        report.outcomes.append(
            ChannelOutcome(channel="desktop", status="skipped", note="digest.desktop is false")
        )
    if settings.smtp is None:
        report.outcomes.append(
            ChannelOutcome(
                channel="email", status="skipped", note="no [digest.smtp] section in the config"
            )
        )
    else:
        report.outcomes.append(send_mail(digest, settings.smtp))
    for outcome in report.failed:
        logger.warning("digest notification failed: %s: %s", outcome.channel, outcome.note)
    return report
