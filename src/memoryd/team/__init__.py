"""Team memory (issue 32, first layer): users and tokens, projects keyed by their git remote,
the one gate every team request goes through, and the team server's TLS surface.

`keys`, `policy`, `store`, `tls` and `config` are domain modules (stdlib, SQLite and
`cryptography`); `server` is a surface (it wraps the daemon's HTTP app).
"""
