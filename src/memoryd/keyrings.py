"""Which OS keyring backends may keep a secret: a scope key (`sensitive/keys.py`) or the
local FalkorDB server's password (`graph/falkordb_server.py`). A plaintext file, the null
backend and the fail backend are not keyrings: a secret given to them is lost or readable.
`keyring` is imported only when asked (the capture hook never loads it).
"""

from __future__ import annotations

import os
from typing import Any

INSECURE_BACKENDS = {
    "keyrings.alt.file.PlaintextKeyring": "a plaintext file anyone who reads your home can use",
    "keyring.backends.null.Keyring": "nothing (the null backend forgets every key)",
    "keyring.backends.fail.Keyring": "nothing (no keyring backend is available)",
}
"""Backends a secret must never go to: by class (and its bases), from keyring and
keyrings.alt. A `ChainerBackend` is judged by the backends it chains."""
TEST_KEYRING_ENV = "MEMORYD_TEST_ONLY_INSECURE_KEYRING"
"""The tests' file keyring: the one insecure backend class named here is let through. Only
tests/conftest.py sets it (the OS keyring is the one part the suite fakes); never set it."""


def backend_name(backend: object) -> str:
    cls = type(backend)
    return f"{cls.__module__}.{cls.__qualname__}"


def insecure(backend: object) -> str | None:
    """Where this backend would keep a secret, when that is not a real keyring; None when it is."""
    allowed = os.environ.get(TEST_KEYRING_ENV)
    if allowed and backend_name(backend) == allowed:
        return None
    for cls in type(backend).__mro__:
        why = INSECURE_BACKENDS.get(f"{cls.__module__}.{cls.__qualname__}")
        if why is not None:
            return why
    return None


def real_backends() -> tuple[list[Any], list[str]]:
    """The backends a secret may be kept in or read from (a chainer's real ones, best
    first), and the names and reasons of those refused."""
    import keyring
    from keyring.backends.chainer import ChainerBackend

    ring = keyring.get_keyring()
    chain = list(ring.backends) if isinstance(ring, ChainerBackend) else [ring]
    real: list[Any] = []
    refused: list[str] = []
    for backend in chain:
        why = insecure(backend)
        if why is None:
            real.append(backend)
        else:
            refused.append(f"{backend_name(backend)} ({why})")
    if not chain:
        refused.append(f"{backend_name(ring)} (chains no backend)")
    return real, refused
