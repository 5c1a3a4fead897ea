"""`memoryd sensitive`: mark, unmark, status, rotate-key, export-key, import-key.

A passphrase is asked for on the terminal (twice when it is new), or read from
`MEMORYD_SENSITIVE_PASSPHRASE` when that is set (scripts, the daemon); never from an option,
which would leave it in the shell history. export-key / import-key work on this machine's
keyring and the scope's key.json directly, daemon or not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from memoryd.cli.options import HomeOpt, JsonOpt, path_param
from memoryd.cli.output import emit_json, fail, out, print_table
from memoryd.cli.running import load_settings, run
from memoryd.errors import InvalidInput, MemorydError
from memoryd.scope import resolve_scope

if TYPE_CHECKING:
    from memoryd.sensitive.keys import KeyStore

PASSPHRASE_ENV = "MEMORYD_SENSITIVE_PASSPHRASE"
"""`memoryd.sensitive.keys.PASSPHRASE_ENV`, written out: the key store imports cryptography,
which the CLI loads only for a command that needs it (tests/unit/test_cli_startup.py holds
the two equal)."""

sensitive_app = typer.Typer(
    help="Sensitive scopes: encrypted at rest, read only under a grant.", no_args_is_help=True
)

PathArg = Annotated[
    Path, typer.Argument(help="A directory of the project (its scope root).", callback=path_param)
]
PassphraseOpt = Annotated[
    bool,
    typer.Option(
        "--passphrase",
        help=f"Derive the key from a passphrase (asked for, or ${PASSPHRASE_ENV}) instead"
        " of keeping a random key in the OS keyring.",
    ),
]


def ask_passphrase(prompt: str, *, confirm: bool) -> str:
    """The passphrase from the environment, else from the terminal (hidden)."""
    given = os.environ.get(PASSPHRASE_ENV)
    if given:
        return given
    try:
        value: str = typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm)
    except typer.Abort:
        raise fail(
            InvalidInput("no passphrase given", hint=f"type it, or set {PASSPHRASE_ENV}")
        ) from None
    return value


def mark(path: PathArg, passphrase: PassphraseOpt = False, home: HomeOpt = None,
         as_json: JsonOpt = False) -> None:  # fmt: skip
    """Mark the project at PATH sensitive: writes .memoryd-sensitive at its root, makes its
    key, encrypts every memory it holds to *.md.enc and removes the plaintext from the graph,
    the index and the queues. Without a usable OS keyring, use --passphrase."""
    phrase = ask_passphrase("New passphrase for this scope", confirm=True) if passphrase else None
    report = run(home, lambda svc: svc.sensitive_mark(path, passphrase=phrase), writes=True)
    if as_json:
        emit_json(report)
        return
    out.print(
        f"marked {report.path} sensitive (scope {report.scope_hash}, key {report.key_id} in"
        f" {report.key_mode}): {report.encrypted} memories encrypted in {report.seconds:.1f}s",
        markup=False,
    )
    if report.key_mode == "keyring":
        out.print(f"back the key up: memoryd sensitive export-key {report.path} FILE", markup=False)


def unmark(path: PathArg, yes: Annotated[bool, typer.Option("--yes", help="Confirm.")] = False,
           home: HomeOpt = None, as_json: JsonOpt = False) -> None:  # fmt: skip
    """Decrypt the project's memories back to plaintext and forget its key. Needs --yes and
    a grant (`memoryd grant PATH --duration once`)."""
    report = run(home, lambda svc: svc.sensitive_unmark(path, yes=yes), writes=True)
    if as_json:
        emit_json(report)
    else:
        out.print(f"unmarked {report.path}: {report.decrypted} memories decrypted", markup=False)


def status(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """The sensitive scopes: key id and where it is kept, whether this machine has it, and
    how many files are encrypted (or still plaintext, after a mark cut short)."""
    found = run(home, lambda svc: svc.sensitive_status())
    if as_json:
        emit_json(found)
        return
    if not found:
        out.print("no sensitive scopes", markup=False)
        return
    print_table(
        ["scope", "path", "key", "kept in", "key here", "encrypted", "plaintext"],
        [
            [
                s.scope_hash,
                s.path,
                s.key_id or "—",
                ",".join(s.key_modes) or "—",
                "yes" if s.key_available else "NO",
                str(s.encrypted),
                str(s.plaintext),
            ]
            for s in found
        ],
    )
    for s in found:
        if s.key_problem:
            out.print(f"{s.scope_hash}: {s.key_problem}", markup=False)


def rotate_key(path: PathArg, passphrase: PassphraseOpt = False, home: HomeOpt = None,
               as_json: JsonOpt = False) -> None:  # fmt: skip
    """Re-encrypt every memory of the project under a new key, then forget the old key."""
    phrase = ask_passphrase("New passphrase for this scope", confirm=True) if passphrase else None
    report = run(home, lambda svc: svc.sensitive_rotate_key(path, passphrase=phrase), writes=True)
    if as_json:
        emit_json(report)
    else:
        out.print(
            f"rotated the key of {report.path}: {report.resealed} files re-encrypted under"
            f" {report.key_id} (old: {', '.join(report.old_keys)})",
            markup=False,
        )


def _keys(home: Path | None) -> tuple[KeyStore, Path]:
    from memoryd.sensitive.keys import KeyStore

    settings = load_settings(home)
    return KeyStore(settings.home), settings.home


def export_key(path: PathArg,
               file: Annotated[Path, typer.Argument(help="Where to write the wrapped key.",
                                                    callback=path_param)],
               home: HomeOpt = None) -> None:  # fmt: skip
    """Write the project's keys to FILE, wrapped by a passphrase you choose: the backup that
    `import-key` restores on a new machine or after a wiped keyring."""
    try:
        keys, _ = _keys(home)
        scope_hash = resolve_scope(path, with_remote=False).scope_hash
        keys.current(scope_hash)  # fail before asking when the key is not here
        phrase = ask_passphrase("Passphrase to wrap the key with", confirm=True)
        from memoryd.vault import atomic_write

        atomic_write(file.expanduser(), keys.export_keys(scope_hash, phrase))
    except MemorydError as exc:
        raise fail(exc) from exc
    out.print(f"wrote the keys of scope {scope_hash} to {file}", markup=False)


def import_key(path: PathArg,
               file: Annotated[Path, typer.Argument(help="A file made by export-key.",
                                                    callback=path_param)],
               home: HomeOpt = None) -> None:  # fmt: skip
    """Put the keys exported by `export-key` into this machine's keyring."""
    try:
        keys, _ = _keys(home)
        scope_hash = resolve_scope(path, with_remote=False).scope_hash
        try:
            data = file.expanduser().read_bytes()
        except OSError as exc:
            raise InvalidInput(f"cannot read {file}: {exc.strerror or exc}") from exc
        phrase = ask_passphrase("Passphrase of the key file", confirm=False)
        imported = keys.import_keys(scope_hash, data, phrase)
    except MemorydError as exc:
        raise fail(exc) from exc
    out.print(f"imported key(s) {', '.join(imported)} for scope {scope_hash}", markup=False)


def register(app: typer.Typer) -> None:
    sensitive_app.command()(mark)
    sensitive_app.command()(unmark)
    sensitive_app.command()(status)
    sensitive_app.command("rotate-key")(rotate_key)
    sensitive_app.command("export-key")(export_key)
    sensitive_app.command("import-key")(import_key)
    app.add_typer(sensitive_app, name="sensitive")
