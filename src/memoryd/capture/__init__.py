"""Capture: turn an agent's session into one `session` memory in the vault, from a hook.

`memoryd capture` runs inside agents' hooks (Claude Code gives every SessionEnd hook 1.5 s
together), so this package is held to rules the rest of memoryd is not:

* **Standard library only.** Importing memoryd's pydantic models, pydantic-settings, typer
  and rich takes the whole budget before a byte of the transcript is read (bench/RESULTS.md).
  So capture renders the vault's file format itself (`memoryd.memfile`), reads the settings
  it needs itself (`memoryd.capture_limits`), and a test checks both against
  `vault.parse`/`vault.render` and `config.load_settings`. Those two and `memoryd.redact`
  live below the service, which uses them too.
* **Never breaks the agent.** `hook.main` always returns 0, prints only the agent's documented
  JSON (`sources.stdout_reply`), logs to `<home>/logs/capture.log`, and keeps a redacted copy of
  any payload it could not capture in `<home>/inbox/failed/` for `memoryd capture retry`.
* **Secrets never reach the disk.** Every text is passed through `memoryd.redact` before it is
  written anywhere: the memory, the session journal, the failed-payload copy and the log.
* **Never touches the graph or the index.** The memory file is written atomically, then an
  index request is dropped into `<home>/inbox/`; `MemoryAPI.drain_inbox` indexes it.

Modules: `sources` (each agent's payloads and transcript formats), `transcripts` and
`specstory` (session files), `hook` (the command), `sealing` (what a sensitive scope's hook
keeps: sealed for the scope's public key), `inject` (the inject hook); `memoryd.entry` runs
`hook` and `inject` before the CLI is imported. The session, its hook-event journal and its
summary are `memoryd.sessions`, below the service (which assembles a sensitive scope's
journaled session from its sealed journal); this package is a surface nothing else imports
(the daemon's retry route excepted).
"""
