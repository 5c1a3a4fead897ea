"""The sync base: for each memory, the digest of each merged field when this data dir and
the other side last agreed on it (an export, or an import's result). A three-way merge needs
it to tell a field one side changed from one both changed (`sync.merge`).

Kept in `<home>/sync/base.jsonl`, one line per memory (`{"slug": …, "d": "digest …"}`), written
atomically; it is derived from past syncs only, so losing it makes the next import treat
every differing field as changed on both sides, never lose data."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from memoryd.sync.merge import BODY, SCALARS
from memoryd.vault import atomic_write

logger = logging.getLogger(__name__)

FIELDS = (*SCALARS, BODY)


class SyncBase:
    def __init__(self, home: Path) -> None:
        self.path = home / "sync" / "base.jsonl"

    def load(self) -> dict[str, str]:
        """slug → the digests joined by spaces, in FIELDS order (compact at 100k memories)."""
        found: dict[str, str] = {}
        try:
            with self.path.open(encoding="utf-8") as fh:
                for line in fh:
                    try:
                        row = json.loads(line)
                        found[str(row["slug"])] = str(row["d"])
                    except (ValueError, KeyError, TypeError):
                        logger.warning("ignoring a damaged line of %s", self.path)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            logger.warning("cannot read %s (%s): merging without a base", self.path, exc)
        return found

    @staticmethod
    def unpack(packed: str | None) -> dict[str, str] | None:
        if not packed:
            return None
        values = packed.split(" ")
        return dict(zip(FIELDS, values, strict=False)) if len(values) == len(FIELDS) else None

    @staticmethod
    def pack(digests: Mapping[str, str]) -> str:
        return " ".join(digests.get(name, "-") for name in FIELDS)

    def save(self, base: Mapping[str, str]) -> None:
        lines = (
            json.dumps({"slug": slug, "d": base[slug]}, ensure_ascii=False) + "\n"
            for slug in sorted(base)
        )
        atomic_write(self.path, "".join(lines).encode("utf-8"))
