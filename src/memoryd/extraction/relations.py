"""Relation rules over sentences, English and Chinese, mapped to the 11 predicates. Pure Python.

A rule is a regex with named slots. The slot nearest the end of the match takes every entity
in its clause ("uses React, Vite and Vitest"); an earlier slot takes the entity closest to the
verb ("from React and Redux to Solid" → Redux). Single-slot rules find their subject in the
entity right before the verb ("FastAPI uses Starlette"); without one the subject is the memory
itself ("We use Kuzu" → memory uses Kuzu).

Confidence: each rule has its own; decision or causal language in the sentence (决定, because)
adds 0.05 each and is reported in the notes; a relation is never more than 0.3 above the
confidence of its least certain entity, so a guessed entity cannot carry a confident edge.

Over 600 lines: the relation rules of both languages and their confidence, kept together because
they are measured as one set.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cache

from memoryd.extraction.patterns import CJK_CHARS, has_cjk
from memoryd.models import EntityType, Predicate, ProposedEntity, ProposedRelation

Span = tuple[int, int]

MAX_CONFIDENCE = 0.95
CUE_BOOST = 0.05
ENTITY_MARGIN = 0.3
SLOT_GUESS_CONFIDENCE = 0.45
EVIDENCE_CHARS = 200
LEFT_SLOT_CHARS = 60

SUPERSEDE_PREFERS = 0.8
SUPERSEDE_EDGE = 0.7
CITES_LINK = 0.85


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
    a literal search is far cheaper than the rule's regex tried at every position."""
    trigger: re.Pattern[str] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.keywords:
            trigger = re.compile("|".join(re.escape(k) for k in self.keywords))
            object.__setattr__(self, "trigger", trigger)

    left: str | None = None
    """A slot filled from the text before the match ("Solid instead of React" → new), so no
    regex has to start with a lazy group, which costs a scan from every position."""


@dataclass(frozen=True)
class Mention:
    """An entity occurrence before linking."""

    start: int
    end: int
    type: EntityType
    confidence: float


@dataclass(frozen=True)
class RawRelation:
    """A relation between spans (None is the memory), turned into entity ids after linking."""

    subject: Span | None
    predicate: Predicate
    object: Span | None
    confidence: float
    evidence: str
    rule: str


@dataclass(frozen=True)
class SlotGuess:
    start: int
    end: int
    name: str
    type: EntityType
    confidence: float


@dataclass
class RelationFindings:
    relations: list[RawRelation] = field(default_factory=list)
    guesses: list[SlotGuess] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- rule table ------------------------------------------------------------------------------

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


CLAUSE_CUT_RE = re.compile(
    r"\b(?:because|since|but|so|which|while|when|where|instead|rather|although|though|unless|"
    r"until|after|before|if|whereas|then|as)\b|\bto\s+(?:be|do|make|get|build|avoid|keep|"
    r"handle|store|run|reduce|speed|cut|fix|support)\b|因为|由于|所以|但是?|而且|然后|以便|为了|"
    r"因此|并且|不过|导致",
    re.IGNORECASE,
)
SUBJECT_GAP_RE = re.compile(
    r"^(?:[\s,]|(?:also|now|still|already|internally|heavily|mostly|mainly|only|directly|"
    r"currently|itself|which|that|then|really|actually|can|could|will|would|should|must|may|"
    r"might|does|did|do|has|have|had|is|are|was|were|now)\b|也|还|目前|现在|已经|主要|都|则|"
    r"仍然|一直|会|将|就|本身|可以|能)*$",
    re.IGNORECASE,
)
CHAIN_GAP_RE = re.compile(r"^\s*(?:on|in|inside|atop|on top of|在|上的?|之上)?\s*$", re.IGNORECASE)
SLOT_ARTICLE_RE = re.compile(r"^\s*(?:(?:the|a|an|our|their|its|my|your|this|that)\s+)?")
SLOT_NAME_RE = re.compile(r"`(?P<code>[A-Za-z][\w.+#/-]*)`|(?P<word>[A-Za-z][\w.+#-]*[\w+#])")
SLOT_PLACE_ZH_RE = re.compile(rf"^\s*(?P<place>[{CJK_CHARS}]{{2,6}}?)(?:的|、|和|与|以及|$)")

DECISION_CUES = re.compile(
    r"\b(?:decided to|decide to|decision|we chose|chose|chosen|went with|settled on|"
    r"going with|opted for|opt for)\b|决定|决策|采用|选定|敲定|拍板",
    re.IGNORECASE,
)
CAUSAL_CUES = re.compile(
    r"\b(?:because|therefore|due to|caused by|as a result|so that|so we|in order to|leads to|"
    r"led to|results in|resulted in|fixed by|resolved by|thus|hence)\b|因为|所以|由于|导致|"
    r"因此|为了|以便|从而",
    re.IGNORECASE,
)


# --- matching ------------------------------------------------------------------------------


class _SentenceContext:
    """The mentions of one sentence, growing as empty slots get guessed entities."""

    def __init__(self, text: str, start: int, end: int, mentions: list[Mention]) -> None:
        self.text = text
        self.start = start
        self.end = end
        self.mentions = sorted(mentions, key=lambda m: m.start)

    def within(self, start: int, end: int) -> list[Mention]:
        return [m for m in self.mentions if start <= m.start < end]

    def add(self, mention: Mention) -> None:
        self.mentions.append(mention)
        self.mentions.sort(key=lambda m: m.start)


def _cut_region(text: str, start: int, end: int, extra: str | None) -> int:
    """End of the clause that starts at `start` (before because/但是/…)."""
    cut = end
    found = CLAUSE_CUT_RE.search(text, start, end)
    if found and found.start() > start:
        cut = found.start()
    if extra:
        more = re.search(extra, text[start:cut], re.IGNORECASE)
        if more and more.start() > 0:
            cut = start + more.start()
    return cut


_NEXT_CAPITALISED_RE = re.compile(r" [A-Z][a-z]")


def _guess_slot(
    text: str, start: int, end: int, rule: Rule, common: frozenset[str]
) -> SlotGuess | None:
    """An entity for an empty slot, when the slot starts with something name-shaped."""
    if rule.slot_type is None:
        return None
    region = text[start:end]
    if rule.slot_type is EntityType.PLACE:
        place = SLOT_PLACE_ZH_RE.match(region)
        if place:
            s = start + place.start("place")
            return SlotGuess(
                s,
                s + len(place.group("place")),
                place.group("place"),
                rule.slot_type,
                SLOT_GUESS_CONFIDENCE,
            )
    lead = SLOT_ARTICLE_RE.match(region)
    offset = lead.end() if lead else 0
    found = SLOT_NAME_RE.match(region, offset)
    if not found:
        return None
    group = "code" if found.group("code") else "word"
    name = found.group(group)
    if group == "word" and not name[0].isupper():
        return None  # only capitalised or `backticked` words look like names
    if name.lower() in common or (name.isupper() and len(name) <= 4) or len(name) < 2:
        return None
    if group == "word" and _NEXT_CAPITALISED_RE.match(region, found.end(group)):
        return None  # one word of a longer name ("a Simplified Git Flow"): its type is unknown
    s = start + found.start(group)
    return SlotGuess(s, s + len(name), name, rule.slot_type, SLOT_GUESS_CONFIDENCE)


def _slot_mentions(
    ctx: _SentenceContext,
    span: Span,
    last: bool,
    rule: Rule,
    common: frozenset[str],
    findings: RelationFindings,
) -> list[Mention]:
    """Mentions filling one slot: all in the clause for the last slot, else the nearest one."""
    g_start, g_end = span
    if last:
        g_end = _cut_region(ctx.text, g_start, g_end, rule.extra_cut)
    found = ctx.within(g_start, g_end)
    if found:
        lead = len(ctx.text[g_start : found[0].start]) - len(
            ctx.text[g_start : found[0].start].lstrip()
        )
        if found[0].start - g_start - lead > rule.max_gap:
            return []
        return found if last else [found[-1]]
    guess = _guess_slot(ctx.text, g_start, g_end, rule, common)
    if guess is None:
        return []
    findings.guesses.append(guess)
    mention = Mention(guess.start, guess.end, guess.type, guess.confidence)
    ctx.add(mention)
    return [mention]


def _adjacent_subject(ctx: _SentenceContext, verb_start: int, rule: Rule) -> Mention | None:
    before = [m for m in ctx.mentions if m.end <= verb_start]
    if not before:
        return None
    candidate = before[-1]
    if not SUBJECT_GAP_RE.match(ctx.text[candidate.end : verb_start]):
        return None
    if rule.subject_types is not None and candidate.type not in rule.subject_types:
        return None
    return candidate


def _confidence(base: float, boost: float, *mentions: Mention | None) -> float:
    conf = min(base + boost, MAX_CONFIDENCE)
    for mention in mentions:
        if mention is not None:
            conf = min(conf, mention.confidence + ENTITY_MARGIN)
    return round(conf, 3)


def _span(m: Mention | None) -> Span | None:
    return None if m is None else (m.start, m.end)


def _apply_rule(
    ctx: _SentenceContext,
    rule: Rule,
    match: re.Match[str],
    boost: float,
    evidence: str,
    common: frozenset[str],
    findings: RelationFindings,
) -> None:
    spans: dict[str, Span] = {
        g: (ctx.start + match.start(g), ctx.start + match.end(g))
        for g in ("old", "new", "obj", "a", "b")
        if g in rule.regex.groupindex
    }
    last_group = max(spans, key=lambda g: spans[g][0])
    if rule.left is not None:
        end = ctx.start + match.start()
        start = max(ctx.start, end - LEFT_SLOT_CHARS)
        comma = max(ctx.text.rfind("，", start, end), ctx.text.rfind(";", start, end))
        spans[rule.left] = (max(start, comma + 1), end)
    slots = {
        g: _slot_mentions(ctx, span, g == last_group, rule, common, findings)
        for g, span in spans.items()
    }
    out = findings.relations

    def emit(subj: Mention | None, pred: Predicate, obj: Mention | None, base: float) -> None:
        if subj is not None and obj is not None and (subj.start, subj.end) == (obj.start, obj.end):
            return
        out.append(
            RawRelation(
                _span(subj),
                pred,
                _span(obj),
                _confidence(base, boost, subj, obj),
                evidence,
                rule.name,
            )
        )

    if rule.kind is Kind.SUPERSEDE:
        for new in slots["new"]:
            if not slots["old"]:
                break
            emit(None, Predicate.PREFERS, new, SUPERSEDE_PREFERS)
            for old in slots["old"]:
                emit(new, Predicate.SUPERSEDES, old, rule.confidence)
                emit(old, Predicate.SUPERSEDED_BY, new, rule.confidence)
    elif rule.kind is Kind.PAIR:
        for a in slots["a"]:
            for b in slots["b"]:
                emit(a, rule.predicate, b, rule.confidence)
    else:
        objects = slots["obj"]
        if not objects:
            return
        subject = _adjacent_subject(ctx, ctx.start + match.start(), rule)
        if subject is None and not rule.memory_subject:
            return
        previous: Mention | None = None
        for obj in objects:
            chained = (
                rule.predicate is Predicate.RUNS_ON
                and previous is not None
                and CHAIN_GAP_RE.match(ctx.text[previous.end : obj.start]) is not None
            )
            if chained:
                emit(previous, rule.predicate, obj, rule.confidence - 0.05)
            else:
                emit(subject, rule.predicate, obj, rule.confidence)
            previous = obj


def find_relations(
    text: str,
    sentences: Sequence[Span],
    mentions: Sequence[Mention],
    cited: Sequence[Span],
    common_words: frozenset[str],
) -> RelationFindings:
    """Apply every rule to every sentence; `cited` spans (URLs, RFCs) are cited by the memory."""
    findings = RelationFindings()
    seen_cues: set[tuple[str, str]] = set()
    ordered = sorted(mentions, key=lambda m: m.start)
    starts = [m.start for m in ordered]
    for s_start, s_end in sentences:
        sentence = text[s_start:s_end]
        inside = ordered[bisect_left(starts, s_start) : bisect_left(starts, s_end)]
        ctx = _SentenceContext(text, s_start, s_end, inside)
        boost = 0.0
        for label, cues in (("decision", DECISION_CUES), ("causal", CAUSAL_CUES)):
            cue = cues.search(sentence)
            if cue:
                boost += CUE_BOOST
                word = cue.group().lower()
                if (label, word) not in seen_cues:
                    seen_cues.add((label, word))
                    findings.notes.append(f"{label} language: {word}")
        evidence = " ".join(sentence.split())[:EVIDENCE_CHARS]
        chinese = has_cjk(sentence)
        lowered = sentence.lower()
        for rule in rules():
            if rule.chinese and not chinese:
                continue
            if rule.trigger is not None and rule.trigger.search(lowered) is None:
                continue
            for match in rule.regex.finditer(sentence):
                _apply_rule(ctx, rule, match, boost, evidence, common_words, findings)
    for span in cited:
        ordered_hit = next((m for m in ordered if (m.start, m.end) == span), None)
        if ordered_hit is not None:
            findings.relations.append(
                RawRelation(
                    None,
                    Predicate.CITES,
                    span,
                    _confidence(CITES_LINK, 0.0, ordered_hit),
                    text[span[0] : span[1]],
                    "cites-link",
                )
            )
    return findings


def mention_relations(entities: Sequence[ProposedEntity], text: str) -> list[ProposedRelation]:
    """`memory mentions X` for every entity, as confident as the entity itself."""
    relations: list[ProposedRelation] = []
    for entity in entities:
        surface = ""
        if entity.spans:
            start, end = entity.spans[0]
            surface = text[start:end]
        relations.append(
            ProposedRelation(
                subject="memory",
                predicate=Predicate.MENTIONS,
                object=entity.id,
                confidence=entity.confidence,
                evidence=surface or entity.name,
            )
        )
    return relations
