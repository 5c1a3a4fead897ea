"""`LazyPattern`: a regular expression compiled on its first use, for a module whose
patterns a process mostly does not need (the redaction rules in the capture hook)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from typing import Any


class LazyPattern:
    """A pattern compiled on its first use. Each rule runs only when its word is in the
    text, so a process that redacts a few texts (the capture hook) needs few of this
    module's patterns, and compiling all of them at import was most of the module's import
    (bench/RESULTS.md). The first call puts the compiled pattern's own methods in place of
    these: later calls cost what a compiled pattern's do."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._source = (pattern, flags)

    def _compiled(self) -> re.Pattern[str]:
        pattern = re.compile(*self._source)
        vars(self).update(
            finditer=pattern.finditer,
            search=pattern.search,
            match=pattern.match,
            fullmatch=pattern.fullmatch,
            sub=pattern.sub,
            split=pattern.split,
            findall=pattern.findall,
        )
        return pattern

    def finditer(
        self, text: str, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[str]]:
        return self._compiled().finditer(text, pos, endpos)

    def search(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self._compiled().search(text, pos, endpos)

    def match(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self._compiled().match(text, pos, endpos)

    def fullmatch(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self._compiled().fullmatch(text, pos, endpos)

    def sub(self, repl: str | Callable[[re.Match[str]], str], text: str, count: int = 0) -> str:
        return self._compiled().sub(repl, text, count)

    def split(self, text: str, maxsplit: int = 0) -> list[str | Any]:
        return self._compiled().split(text, maxsplit)

    def findall(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self._compiled().findall(text, pos, endpos)
