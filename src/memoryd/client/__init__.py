"""The daemon's client: the one `MemoryAPI` over the daemon's Unix socket.

`connect` (whether a daemon answers, and `open_api`: its client, else the service in
process), `remote` (`RemoteService`, one HTTP call per `MemoryAPI` method) and `wire` (the
errors and arguments as they cross the socket). The CLI, notebooks, `memoryd.open` and
`daemon/control` (a second daemon asks the first) reach the daemon through it.
"""
