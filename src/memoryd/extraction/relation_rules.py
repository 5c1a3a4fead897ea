"""The relation rule table, English and Chinese (`rules`): each rule a regex with named slots,
the predicate it gives and its confidence; `extraction.relations` applies them to sentences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import cache

from memoryd.models import EntityType, Predicate

SUPERSEDE_EDGE = 0.7


class Kind(Enum):
    SUPERSEDE = "supersede"  # slots old/new: memory prefers new, new supersedes old
    LINK = "link"  # slot obj: subject (adjacent entity or memory) -> obj
    PAIR = "pair"  # slots a/b: a -> b


@dataclass(frozen=True)
class Rule:
    name: str
    regex: re.Pattern[str]
    kind: Kind
    predicate: Predicate
    confidence: float
    memory_subject: bool = True
    """Fall back to the memory as subject when no entity stands right before the verb."""
    subject_types: frozenset[EntityType] | None = None
    slot_type: EntityType | None = None
    """Type of the entity guessed for an empty slot ("moved to Fly" → a tool); None: no guess."""
    max_gap: int = 80
    """How far after its slot's start the first entity may begin."""
    extra_cut: str | None = None
    chinese: bool = False
    """Chinese rules are skipped for sentences without a Chinese character."""
    keywords: tuple[str, ...] = ()
    """Lower-case substrings one of which the sentence must contain before the regex runs:
    a substring test is far cheaper than the rule's regex tried at every position."""
    left: str | None = None
    """A slot filled from the text before the match ("Solid instead of React" → new), so no
    regex has to start with a lazy group, which costs a scan from every position."""


EN = r"[^.;:!?\n]"  # inside an English clause (commas allowed: lists)
ZH = r"[^，,。；：！？;:!?\n]"  # inside a Chinese clause (、 and 和 join lists)


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_T = EntityType
_P = Predicate


@cache
def rules() -> tuple[Rule, ...]:
    """The rule table, compiled on first use so importing this module stays cheap."""
    return (
        # supersede, English
        Rule(
            "switch-from-to",
            _rx(
                r"\b(?:switch(?:ed|es|ing)?|migrat(?:e|ed|es|ing)|mov(?:e|ed|es|ing)|"
                r"port(?:ed|ing|s)?|transition(?:ed|ing|s)?|went|go(?:ing)?|chang(?:e|ed|es|ing)|"
                r"upgrad(?:e|ed|es|ing)|convert(?:ed|ing|s)?|rewr(?:ite|ote|itten|iting))\b"
                rf"{EN}{{0,40}}?\bfrom\s+(?P<old>{EN}{{1,60}}?)\s+(?:to|over to|onto|into)\s+"
                rf"(?P<new>{EN}{{1,80}})"
            ),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            slot_type=_T.TOOL,
            keywords=("from",),
        ),
        Rule(
            "replace-with",
            _rx(
                rf"\breplac(?:e|ed|es|ing)\s+(?!by\b|with\b)(?P<old>{EN}{{1,60}}?)\s+(?:with|by)\s+"
                rf"(?P<new>{EN}{{1,80}})"
            ),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            slot_type=_T.TOOL,
            keywords=("replac",),
        ),
        Rule(
            "was-replaced-by",
            _rx(
                r"\s(?:was|were|is|are|has been|have been|got|gets|will be)"
                rf"\s+replaced\s+(?:with|by)\s+(?P<new>{EN}{{1,80}})"
            ),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            left="old",
            keywords=("replaced",),
        ),
        Rule(
            "instead-of",
            _rx(rf"\s(?:instead of|rather than|in place of)\s+(?P<old>{EN}{{1,60}})"),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            left="new",
            keywords=("instead of", "rather than", "in place of"),
        ),
        Rule(
            "drop-in-favour-of",
            _rx(
                r"\b(?:drop(?:ped|ping|s)?|ditch(?:ed|ing)?|abandon(?:ed|ing)?|deprecat(?:e|ed|ing)|"
                rf"remov(?:e|ed|ing)|retir(?:e|ed|ing))\s+(?P<old>{EN}{{1,60}}?)\s+"
                rf"(?:in favou?r of|for)\s+(?P<new>{EN}{{1,80}})"
            ),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            slot_type=_T.TOOL,
            keywords=("drop", "ditch", "abandon", "deprecat", "remov", "retir"),
        ),
        # supersede, Chinese
        Rule(
            "zh-from-to",
            _rx(
                rf"从\s*(?P<old>{ZH}{{1,40}}?)\s*(?:切换?到|切换成|换成|换到|换为|迁移到|迁移至|迁到|"
                r"转到|转向|转为|改成|改为|改用|升级到|过渡到|替换为|替换成)\s*"
                rf"(?P<new>{ZH}{{1,60}})"
            ),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            slot_type=_T.TOOL,
            chinese=True,
            keywords=("从",),
        ),
        Rule(
            "zh-use-to-replace",
            _rx(
                rf"(?:用|以|拿)\s*(?P<new>{ZH}{{1,40}}?)\s*(?:替换|替代|取代|代替)(?:了|掉)?\s*"
                rf"(?P<old>{ZH}{{1,60}})"
            ),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            chinese=True,
            keywords=("替换", "替代", "取代", "代替"),
        ),
        Rule(
            "zh-replaced-by",
            _rx(rf"被\s*(?P<new>{ZH}{{1,40}}?)\s*(?:替换|替代|取代|代替)(?:了|掉)?"),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            left="old",
            chinese=True,
            keywords=("被",),
        ),
        Rule(
            "zh-change-into",
            _rx(rf"(?:替换|(?<![转变交])换|改|切换?)(?:成|为)了?\s*(?P<new>{ZH}{{1,60}})"),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            left="old",
            chinese=True,
            keywords=("成", "为"),
        ),
        Rule(
            "zh-abandon-for",
            _rx(
                r"(?:弃用|放弃|不再使用|不再用|淘汰|抛弃)(?:了)?\s*"
                rf"(?P<old>{ZH}{{1,40}}?)\s*[,，]?\s*(?:改用|转用|换用|转而使用|改为使用|转向)\s*"
                rf"(?P<new>{ZH}{{1,60}})"
            ),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            slot_type=_T.TOOL,
            chinese=True,
            keywords=("弃用", "放弃", "不再", "淘汰", "抛弃"),
        ),
        Rule(
            "zh-rather-than",
            _rx(rf"(?:而不是|而非|取代了?)\s*(?P<old>{ZH}{{1,60}})"),
            Kind.SUPERSEDE,
            _P.SUPERSEDES,
            SUPERSEDE_EDGE,
            left="new",
            chinese=True,
            keywords=("而不是", "而非", "取代"),
        ),
        # runs_on
        Rule(
            "runs-on",
            _rx(
                r"\b(?:(?:runs?|running|ran)\s+(?:on|in|inside|atop)|(?:deployed|hosted)\s+(?:on|to|onto)"
                rf"|deploys?\s+to|deploying\s+to)\s+(?P<obj>{EN}{{1,80}})"
            ),
            Kind.LINK,
            _P.RUNS_ON,
            0.75,
            slot_type=_T.TOOL,
            keywords=("run", "ran", "deploy", "host"),
        ),
        Rule(
            "zh-runs-on",
            _rx(
                r"(?:运行在|运行于|跑在|部署在|部署到|部署于|托管在|托管于|搭建在|架设在)\s*"
                rf"(?P<obj>{ZH}{{1,60}})"
            ),
            Kind.LINK,
            _P.RUNS_ON,
            0.75,
            slot_type=_T.TOOL,
            chinese=True,
            keywords=("运行", "跑在", "部署", "托管", "搭建", "架设"),
        ),
        # uses
        Rule(
            "uses",
            _rx(
                r"\b(?:use|uses|used|using|adopt(?:s|ed|ing)?|built with|written in|powered by|"
                r"leverag(?:e|es|ed|ing)|went with|go with|going with|chose|choose|chosen|picked|"
                r"settled on|opted for|integrat(?:e|es|ed|ing) with|switch(?:ed|es|ing)? to|"
                rf"moved to|migrated to)\s+(?P<obj>{EN}{{1,80}})"
            ),
            Kind.LINK,
            _P.USES,
            0.7,
            slot_type=_T.TOOL,
            keywords=(
                "use",
                "adopt",
                "built with",
                "written in",
                "powered by",
                "leverag",
                "went with",
                "go with",
                "going with",
                "chose",
                "choose",
                "chosen",
                "picked",
                "settled on",
                "opted for",
                "integrat",
                "switch",
                "moved to",
                "migrated to",
            ),
        ),
        Rule(
            "depends-on",
            _rx(
                r"\b(?:depends? on|depending on|relies on|rely on|relying on|(?:is|are) built on"
                r"(?: top of)?|built on top of|(?:is|are) based on|requires|wraps|"
                rf"is a wrapper around|extends)\s+(?P<obj>{EN}{{1,80}})"
            ),
            Kind.LINK,
            _P.USES,
            0.7,
            keywords=(
                "depend",
                "reli",
                "rely",
                "built on",
                "based on",
                "requires",
                "wrap",
                "extends",
            ),
        ),
        Rule(
            "zh-uses",
            _rx(
                r"(?:使用|采用|用了|选用|选择了?|基于|借助|引入了?|依靠|利用|改用|换用|依赖(?:于)?|"
                rf"集成了?)\s*(?:了)?\s*(?P<obj>{ZH}{{1,60}})"
            ),
            Kind.LINK,
            _P.USES,
            0.7,
            slot_type=_T.TOOL,
            chinese=True,
            keywords=(
                "使用",
                "采用",
                "用了",
                "选用",
                "选择",
                "基于",
                "借助",
                "引入",
                "依靠",
                "利用",
                "改用",
                "换用",
                "依赖",
                "集成",
            ),
        ),
        Rule(
            "zh-use-bare",
            _rx(rf"(?<![使采选改换利引应作费信通可实有适])用\s*(?P<obj>{ZH}{{1,60}})"),
            Kind.LINK,
            _P.USES,
            0.65,
            max_gap=1,
            chinese=True,
            keywords=("用",),
        ),
        # prefers
        Rule(
            "prefers",
            _rx(
                r"\b(?:prefer(?:s|red|ring)?|favou?r(?:s|ed|ing)?|recommend(?:s|ed|ing)?|"
                r"(?:would|'d) rather use|go-to (?:is|was))\s+(?:to use\s+|using\s+)?"
                rf"(?P<obj>{EN}{{1,80}})"
            ),
            Kind.LINK,
            _P.PREFERS,
            0.75,
            slot_type=_T.TOOL,
            extra_cut=r"\b(?:over|than|to)\b",
            keywords=("prefer", "favor", "favour", "recommend", "rather use", "go-to"),
        ),
        Rule(
            "zh-prefers",
            _rx(
                r"(?:偏好|更喜欢|更倾向于?|倾向于|首选|优先(?:使用|用|选择|考虑)?|推荐(?:使用|用)?|"
                rf"喜欢用|习惯用)\s*(?P<obj>{ZH}{{1,60}})"
            ),
            Kind.LINK,
            _P.PREFERS,
            0.75,
            slot_type=_T.TOOL,
            extra_cut=r"而不是|而非|胜过|比",
            chinese=True,
            keywords=("偏好", "喜欢", "倾向", "首选", "优先", "推荐", "习惯用"),
        ),
        # belongs_to
        Rule(
            "belongs-to",
            _rx(
                r"\b(?:belongs? to|belonging to|(?:is|are) (?:a )?part of|"
                r"is an? (?:module|component|package|plugin|subproject|service|crate|library) "
                r"(?:of|in|within)|are (?:modules|components|packages|plugins|services) (?:of|in)|"
                rf"(?:is|are) owned by|lives? in)\s+(?P<obj>{EN}{{1,80}})"
            ),
            Kind.LINK,
            _P.BELONGS_TO,
            0.7,
            memory_subject=False,
            slot_type=_T.PROJECT,
            keywords=(
                "belong",
                "part of",
                "module",
                "component",
                "package",
                "plugin",
                "subproject",
                "service",
                "crate",
                "librar",
                "owned by",
                "live",
            ),
        ),
        Rule(
            "zh-belongs-to",
            _rx(rf"(?:属于|隶属于?|归属于?)\s*(?P<obj>{ZH}{{1,40}})"),
            Kind.LINK,
            _P.BELONGS_TO,
            0.7,
            memory_subject=False,
            chinese=True,
            keywords=("属于", "隶属", "归属"),
        ),
        Rule(
            "zh-part-of",
            _rx(rf"是\s*(?P<obj>{ZH}{{1,40}}?)\s*的(?:一部分|组成部分|子项目|子模块|模块|插件)"),
            Kind.LINK,
            _P.BELONGS_TO,
            0.7,
            memory_subject=False,
            chinese=True,
            keywords=("的",),
        ),
        # works_on
        Rule(
            "works-on",
            _rx(
                r"\b(?:works? on|working on|worked on|maintains|maintaining|maintained|"
                r"(?:is|am|are) responsible for|responsible for|owns|leads|contributes? to|"
                rf"contributing to|contributed to|(?:is|am|are) building)\s+(?P<obj>{EN}{{1,80}})"
            ),
            Kind.LINK,
            _P.WORKS_ON,
            0.65,
            subject_types=frozenset({_T.PERSON, _T.ORGANIZATION}),
            slot_type=_T.PROJECT,
            keywords=("work", "maintain", "responsible", "owns", "leads", "contribut", "building"),
        ),
        Rule(
            "zh-works-on",
            _rx(
                rf"(?:负责|参与|在做|正在做|正在开发|开发|维护|主导)(?:了)?\s*(?P<obj>{ZH}{{1,60}})"
            ),
            Kind.LINK,
            _P.WORKS_ON,
            0.65,
            subject_types=frozenset({_T.PERSON, _T.ORGANIZATION}),
            slot_type=_T.PROJECT,
            chinese=True,
            keywords=("负责", "参与", "在做", "开发", "维护", "主导"),
        ),
        # conflicts_with
        Rule(
            "conflicts-with",
            _rx(
                r"\b(?:conflicts? with|conflicting with|clash(?:es|ed)? with|"
                r"(?:is|are) incompatible with|incompatible with|(?:does not|doesn't|do not|don't) "
                rf"work with|breaks)\s+(?P<obj>{EN}{{1,80}})"
            ),
            Kind.LINK,
            _P.CONFLICTS_WITH,
            0.75,
            memory_subject=False,
            keywords=("conflict", "clash", "incompatible", "work with", "breaks"),
        ),
        Rule(
            "conflict-between",
            _rx(
                r"\b(?:conflicts?|incompatibilit(?:y|ies)|clash(?:es)?) between\s+"
                rf"(?P<a>{EN}{{1,40}}?)\s+and\s+(?P<b>{EN}{{1,40}})"
            ),
            Kind.PAIR,
            _P.CONFLICTS_WITH,
            0.75,
            keywords=("between",),
        ),
        Rule(
            "and-conflict",
            _rx(
                rf"\band\s+(?P<b>{EN}{{1,40}}?)\s+(?:conflict|clash|"
                r"are incompatible|don't work together|do not work together)\b"
            ),
            Kind.PAIR,
            _P.CONFLICTS_WITH,
            0.75,
            left="a",
            keywords=("conflict", "clash", "incompatible", "work together"),
        ),
        Rule(
            "zh-conflict",
            _rx(
                rf"(?:与|和|跟)\s*(?P<b>{ZH}{{1,40}}?)\s*(?:之间)?(?:存在|有)?"
                r"(?:冲突|不兼容|互相冲突)"
            ),
            Kind.PAIR,
            _P.CONFLICTS_WITH,
            0.75,
            left="a",
            chinese=True,
            keywords=("冲突", "不兼容"),
        ),
        # cites
        Rule(
            "cites-docs",
            _rx(
                r"\b(?:according to|as described in|as documented in|see|refer to|per|cf\.|"
                rf"following|based on)\s+(?:the\s+)?(?P<obj>{EN}{{1,40}}?)\s+(?:official\s+)?"
                r"(?:docs|documentation|guide|manual|spec|specification|README|changelog|"
                r"release notes|tutorial|handbook|paper)\b"
            ),
            Kind.LINK,
            _P.CITES,
            0.6,
            keywords=(
                "doc",
                "guide",
                "manual",
                "spec",
                "readme",
                "changelog",
                "release notes",
                "tutorial",
                "handbook",
                "paper",
            ),
        ),
        Rule(
            "zh-cites-docs",
            _rx(
                rf"(?:参考|参见|参照|根据|引用|详见|见|按照)(?:了)?\s*(?P<obj>{ZH}{{1,40}}?)\s*"
                r"(?:的)?(?:官方)?(?:文档|手册|规范|说明|指南|教程|论文)"
            ),
            Kind.LINK,
            _P.CITES,
            0.6,
            chinese=True,
            keywords=("文档", "手册", "规范", "说明", "指南", "教程", "论文"),
        ),
        # located_at
        Rule(
            "located-at",
            _rx(
                r"\b(?:located (?:in|at)|based (?:in|at)|headquartered in|situated in|hosted in)\s+"
                rf"(?P<obj>{EN}{{1,80}})"
            ),
            Kind.LINK,
            _P.LOCATED_AT,
            0.7,
            slot_type=_T.PLACE,
            keywords=("located", "based", "headquartered", "situated", "hosted in"),
        ),
        Rule(
            "zh-located-at",
            _rx(rf"(?:位于|坐落于|地处|设在|总部在|总部位于)\s*(?P<obj>{ZH}{{1,40}})"),
            Kind.LINK,
            _P.LOCATED_AT,
            0.7,
            slot_type=_T.PLACE,
            chinese=True,
            keywords=("位于", "坐落于", "地处", "设在", "总部"),
        ),
    )
