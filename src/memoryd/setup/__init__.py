"""`memoryd setup`: write agents' hook and MCP configs, and install memoryd's schedules.

`agents` declares, per agent, which file holds what (interop/FORMATS.md); `merge` edits the
parsed documents; `configfiles` plans, backs up, writes and undoes; `schedules` installs the
daemon and the periodic jobs (systemd, launchd or cron).
"""
