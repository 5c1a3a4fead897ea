"""Sensitive scopes at rest: scope keys (`keys`), the `.md.enc` format (`envelope`), sealed
captures (`sealed`, stdlib at import: the hook uses it) and a scope's files (`files`).

The one home of `cryptography` and of the scope keys in `keyring`. Nothing is imported here,
so the capture hook can import `memoryd.sensitive.sealed` without loading the rest.
"""
