"""The kind stage: a query that names a kind of entity ("which databases") reaches the
memories mentioning any known entity of that kind. A whole session counts only where such an
entity entered its scope, and only when the question asks for the kind as the head of its
"what / which <kind>" frame (`headed_kinds`, `pipeline.kind_stage`)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from memoryd.models import EntityType

_WORD = re.compile(r"[\w][\w.+#/-]*[\w+#]|[\w]", re.UNICODE)

KIND_WORDS: Mapping[str, tuple[EntityType, str | None]] = {
    **dict.fromkeys(
        ("place", "places", "location", "locations"),
        (EntityType.PLACE, None),
    ),
    **dict.fromkeys(("city", "cities", "town", "towns"), (EntityType.PLACE, "city")),
    **dict.fromkeys(("country", "countries", "nation", "nations"), (EntityType.PLACE, "country")),
    **dict.fromkeys(
        ("state", "states", "province", "provinces", "region", "regions"),
        (EntityType.PLACE, "region"),
    ),
    **dict.fromkeys(("database", "databases", "db", "dbs"), (EntityType.TOOL, "database")),
    **dict.fromkeys(("broker", "brokers", "queue", "queues"), (EntityType.TOOL, "message-broker")),
    **dict.fromkeys(("runtime", "runtimes"), (EntityType.TOOL, "runtime")),
    **dict.fromkeys(("language", "languages"), (EntityType.TOOL, "language")),
    **dict.fromkeys(("framework", "frameworks"), (EntityType.LIBRARY, "framework")),
    **dict.fromkeys(("library", "libraries"), (EntityType.LIBRARY, None)),
    **dict.fromkeys(("cloud", "clouds"), (EntityType.TOOL, "cloud")),
    **dict.fromkeys(("editor", "editors", "ide", "ides"), (EntityType.TOOL, "editor")),
    **dict.fromkeys(
        ("company", "companies", "organization", "organizations"), (EntityType.ORGANIZATION, None)
    ),
}
"""Words that name a kind of entity rather than one: "which cities has Jon visited", "what
databases did we try". The kind stage reaches the memories that mention any known entity of
that kind, so an answer that never repeats the question's words ("a trip to Rome") is found."""
CJK_KIND_WORDS: Mapping[str, tuple[EntityType, str | None]] = {
    "数据库": (EntityType.TOOL, "database"),
    "消息队列": (EntityType.TOOL, "message-broker"),
    "框架": (EntityType.LIBRARY, "framework"),
    "编程语言": (EntityType.TOOL, "language"),
    "编辑器": (EntityType.TOOL, "editor"),
    "城市": (EntityType.PLACE, "city"),
    "国家": (EntityType.PLACE, "country"),
}
"""The same kind words in Chinese, found as substrings (Chinese runs no spaces between words):
"我们用的是什么数据库？" asks for a database as "What database do we use?" does."""
_CJK_ASKS = re.compile(r"(?:什么|哪个|哪种|哪些|哪一个)(?:样的)?$")
"""What precedes a Chinese kind word a question asks for: 什么数据库, 哪个框架."""

KIND_IMPLIED: Mapping[str, tuple[str, ...]] = {"country": ("region", "city")}
"""Kinds whose entities answer for another kind: a trip to Rio de Janeiro was a trip to a
country. They lead the kind stage at `IMPLIED_KIND_WEIGHT`."""
IMPLIED_KIND_WEIGHT = 0.5
KIND_ENTITY_LIMIT = 500
"""At most this many entities of one kind lead the kind stage (the most mentioned first)."""


def kind_words(query: str) -> dict[str, tuple[EntityType, str | None]]:
    """The query's words that name a kind of entity, with the (type, kind) they name."""
    found: dict[str, tuple[EntityType, str | None]] = {}
    for word in _WORD.findall(query.lower()):
        named = KIND_WORDS.get(word)
        if named is not None:
            found.setdefault(word, named)
    for word, named in CJK_KIND_WORDS.items():
        if word in query:
            found.setdefault(word, named)
    return found


_HEAD_FRAME = re.compile(
    r"\b(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?((?:[\w.+#-]+\s+){0,2}?)"
    r"([\w-]+)\s+(?:do|does|did|is|are|was|were|has|have|had|can|could|will|would|should"
    r"|to|for|in|on|of|we|you|they|i|the|this|that)\b",
    re.IGNORECASE,
)


def headed_frames(query: str) -> list[tuple[list[str], str]]:
    """Each "what / which <modifiers> <head>" frame's modifier words (at most two) and head
    word, the head followed by a verb or a function word (`headed_kinds`)."""
    return [(m.group(1).split(), m.group(2)) for m in _HEAD_FRAME.finditer(query)]


def headed_kinds(query: str) -> set[str]:
    """The kind words the question asks for as the head of a "what / which <kind>" frame:
    "What database does the API use?", "Which web framework is it built with?" (the kind
    word followed by a verb or a function word), not "What database migration tool …",
    where "database" only qualifies the noun asked about."""
    found: set[str] = set()
    for _, head in headed_frames(query):
        word = head.lower()
        named = KIND_WORDS.get(word)
        if named is not None and named[1] is not None:
            found.add(word)
    for word in CJK_KIND_WORDS:
        at = query.find(word)
        if at > 0 and _CJK_ASKS.search(query[:at]):
            found.add(word)
    return found
