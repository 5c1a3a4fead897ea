"""The words the index treats specially: function words dropped from queries, time words
that say when rather than what, and irregular forms put in their base form. Plain data and
string work, apart from the tantivy adapter (`search.engine`) that applies it to documents and
queries alike."""

from __future__ import annotations

import re

# Function words carry no topic: a question's "when did … the …" must not outvote its nouns.
# Only dropped from queries (documents keep them), and only when content words remain.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    ever also would've i'm it's don't didn't"""
_TIME_WORD_TEXT = """
    current currently still latest anymore nowadays presently original originally initially
    previously formerly"""
"""Words that say when the state asked about holds ("what ORM do we currently use", "the
original ORM"), not what it is: a memory saying "currently" is no more about the ORM. Recall
orders by time itself (`recall.adjustment.current_first`)."""
STOPWORDS = frozenset(_STOPWORD_TEXT.split()) | frozenset(_TIME_WORD_TEXT.split())
LIGHT_WORDS = frozenset({"use", "uses", "used", "using"})
"""Verbs that carry a question's frame, not its topic: "What cache does the API use?", "Is
Kubernetes used?". A memory holding them is ranked a little higher (it likely says what is
used), but holding them is no evidence that it answers: recall's relevance and the query's
weight leave them out (`SearchIndex.local_bm25`)."""

# The stemmer leaves irregular forms alone ("bought" never meets "buy"): a question asks in the
# base form ("what did she buy") what a memory tells in the past ("I bought"). Each entry (ended
# by "|" or the line's end): the base form, then the forms that map to it. Forms that are also
# common other words ("left", "rose", "ground", "bit", "lay", "led") are left out.
IRREGULAR_TEXT = """
    arise arose arisen | awake awoke awoken | beat beaten | become became | begin began begun
    bend bent | bite bitten | bleed bled | blow blew blown | break broke broken
    breed bred | bring brought | build built | burn burnt | buy bought | catch caught
    choose chose chosen | cling clung | come came | creep crept | deal dealt | dig dug
    dive dove | draw drew drawn | dream dreamt | drink drank drunk | drive drove driven
    eat ate eaten | fall fell fallen | feel felt | fight fought | find found | flee fled
    fly flew flown | forbid forbade forbidden | forget forgot forgotten | forgive forgave forgiven
    freeze froze frozen | get got gotten | give gave given | go went gone | grow grew grown
    hang hung | hear heard | hide hid hidden | hold held | keep kept | kneel knelt
    know knew known | lean leant | leap leapt | learn learnt | lend lent | lose lost
    make made | mean meant | meet met | mistake mistook mistaken | overcome overcame
    pay paid | ride rode ridden | ring rang rung | rise risen | run ran | say said
    see saw seen | seek sought | sell sold | send sent | shake shook shaken | shine shone
    shrink shrank shrunk | sing sang sung | sink sank sunk | sit sat | sleep slept | slide slid
    speak spoke spoken | spend spent | spin spun | spring sprang sprung | stand stood
    steal stole stolen | stick stuck | sting stung | strike struck | strive strove striven
    swear swore sworn | sweep swept | swim swam swum | swing swung | take took taken
    teach taught | tear tore torn | tell told | think thought | throw threw thrown
    understand understood | undertake undertook undertaken | wake woke woken | wear wore worn
    weave wove woven | weep wept | win won | withdraw withdrew withdrawn | write wrote written
    child children | man men | woman women | foot feet | tooth teeth | mouse mice
"""
_IRREGULAR = {
    form: forms.split()[0]
    for forms in re.split(r"[|\n]", IRREGULAR_TEXT)
    if forms.strip()
    for form in forms.split()[1:]
}
_WORD_SPLIT = re.compile(r"(\w+)")
_PUNCTUATION_TO_SPACE = str.maketrans({c: " " for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"})


def base_forms(text: str) -> str:
    """`text` with irregular verb forms and plurals put in their base form, for indexing and
    querying alike (what is shown is the text as written)."""
    if _IRREGULAR.keys().isdisjoint(text.lower().translate(_PUNCTUATION_TO_SPACE).split()):
        return text
    parts = _WORD_SPLIT.split(text)  # words at the odd places
    parts[1::2] = [_IRREGULAR.get(word.lower(), word) for word in parts[1::2]]
    return "".join(parts)
