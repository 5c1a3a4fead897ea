"""Kind words in a question, Chinese ones too (recall.kinds)."""

from __future__ import annotations

from memoryd.models import EntityType
from memoryd.recall.kinds import headed_kinds, kind_words


def test_a_chinese_kind_word_is_found_inside_the_unspaced_question() -> None:
    assert kind_words("我们用的是什么数据库？") == {"数据库": (EntityType.TOOL, "database")}
    assert kind_words("仪表盘项目用的是哪个框架？") == {"框架": (EntityType.LIBRARY, "framework")}


def test_a_chinese_kind_word_is_asked_for_only_after_what_or_which() -> None:
    assert headed_kinds("我们用的是什么数据库？") == {"数据库"}
    assert headed_kinds("哪种数据库更快？") == {"数据库"}
    # the database only qualifies what is asked about (its migrations), as in English
    assert headed_kinds("数据库迁移用的是什么工具？") == set()
    assert headed_kinds("What database migration tool do we use?") == set()
