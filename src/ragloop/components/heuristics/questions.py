"""What a question asks for, read without a model: its terms, entities, parts and answer type.

The offline generator, evaluator and controller all start from a :class:`QuestionProfile`:

- ``terms``: the content terms, minus the words that only say what kind of answer is wanted
  ("how *long*", "how *heavy*");
- ``entities``: capitalised runs and quoted titles (``text.entity_phrases``);
- ``parts``: the clauses of a multi-part question ("..., and how long does delivery take?");
- ``focus``: the thing a "what is the X ..." question asks for (``X``), which an answer must
  name;
- ``answer_type``: what a sentence must contain to answer it (a duration, an amount, a weight,
  a date, a time, a number, a person or place, a reason, an exception's name, a version, a
  default value, the name of an API ("which module ...", "how do I ..."), or ``yesno``), found
  by :func:`gives_answer_type`;
- ``identifiers``: the code names it mentions (``functools.lru_cache``, ``maxsize=None``,
  ``exit_on_error``, ``--system-site-packages``), which a passage must name exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragloop.core.text import code_names, content_terms, entity_phrases, stem, tokenize

# Words that name the kind of information a question wants rather than its subject ("the
# refund *policy*", "what *happens* when", "the *difference* between"): an answer gives the
# policy without saying "policy", so a document that never uses one of these is not missing
# content. Everything else a question says is content, everyday words included ("rent").
GENERIC_WORDS = frozenset(
    """policy policies rule rules regulation regulations procedure procedures process
    program programs programme method methods way ways approach thing things kind kinds sort
    sorts type types manner means matter matters aspect aspects detail details information
    info situation situations case cases circumstance circumstances condition conditions
    happen happens happened happening occur occurs occurred difference differences purpose
    meaning mean means work works working handle handles handled deal deals dealt
    option options setting settings""".split()
)


def is_generic(word: str) -> bool:
    """Whether ``word`` names the kind of information asked for (see :data:`GENERIC_WORDS`)."""
    return word.lower() in GENERIC_WORDS


# A clause boundary: "?", ";", or a conjunction followed by a question word or an auxiliary.
_ASKS = (
    r"(?:what|which|who|whom|whose|when|where|why|how|is|are|was|were|does|do|did|can|could|"
    r"should|will|would|has|have)\b"
)
# a later question may open with a phrase before its question word: "..., and in which version
# ...", "..., and by default, what ...", "..., and with the default settings, when ..."
_LEAD = (
    r"(?:(?:in|on|at|for|from|by|with|under|since|until|after|before)\s+"
    r"(?:[^\s,?]+\s+){0,5}?(?:[^\s,?]+,\s+)?)?"
)
CLAUSE_SPLIT = re.compile(
    rf"\?\s+|;\s*|,?\s+(?:and|but|also|as well as)\s+(?={_LEAD}{_ASKS})", re.IGNORECASE
)

# (question pattern, answer type, words of the cue that are not content terms); first match wins
# A question that names the kind of API it wants ("which module", "is there a function", "what
# should I use", "the standard-library way"): its answer leads with the API's name
# (:mod:`ragloop.components.heuristics.naming`); an "api" question may also just ask how to do
# something.
NAMES_KIND = re.compile(
    r"\b(?:which|what)\s+(?:[\w-]+\s+){0,2}?(?:modules?|functions?|methods?|class(?:es)?|"
    r"decorators?|built-?ins?|librar(?:y|ies)|apis?|constants?|attributes?|options?|"
    r"arguments?|parameters?|flags?|actions?|commands?|settings?|tools?)\b"
    r"|\b(?:what|which)(?: one)? (?:should|can|do) (?:i|you|we) (?:use|call|import)\b"
    r"|\bis there an?\b.*\b(?:function|module|method|class|built-?in|tool|decorator)\b"
    r"|\b(?:standard[- ]library|stdlib|built-?in) (?:way|function|module|tool)\b",
    re.IGNORECASE,
)

_TYPE_CUES: list[tuple[re.Pattern[str], str, frozenset[str]]] = [
    (
        re.compile(
            r"\b(?:what|which)\s+(?:[\w-]+\s+)?(?:exceptions?|errors?|warnings?)\b"
            r"|\bwhat\b.*\b(?:raises?|raised)\b",
            re.I,
        ),
        "exception",
        frozenset({"exception", "exceptions", "error", "errors", "raise", "raises", "raised"}),
    ),
    (
        re.compile(
            r"\b(?:which|what)\s+(?:python\s+)?versions?\b"
            r"|\bsince\s+(?:which|what|when)\b"
            r"|^\s*when\s+(?:was|were|did)\b.*\b(?:add|introduc|deprecat|remov|chang|new)\w*",
            re.I,
        ),
        "version",
        frozenset({"version", "versions"}),
    ),
    (
        re.compile(r"\b(?:what|which)\b.*\bdefaults?\b|\bdefaults? to\b", re.I),
        "default",
        frozenset(),
    ),
    (
        re.compile(
            NAMES_KIND.pattern + r"|\b(?:which|what)\s+(?:[\w-]+\s+){0,2}?types?\b"
            r"|(?:^|[.?!]\s+)is there an? \b.*\bway\b"
            r"|(?:^|[.?!,]\s+)how (?:can|do|should|would) (?:i|you|we)\b",
            re.I,
        ),
        "api",
        frozenset({"module", "modules", "way", "use", "standard", "library", "built"}),
    ),
    (re.compile(r"\bhow heavy\b|\bhow much\b.*\bweigh", re.I), "weight", frozenset({"heavy"})),
    (
        re.compile(
            r"\bhow much\b.*\b(?:cost|price|pay|charge|fee)"
            r"|\bwhat (?:does|do|is)\b.*\b(?:cost|price)\b",
            re.I,
        ),
        "amount",
        # an amount answers them: "A tent can be hired for £12 a night" gives the cost
        frozenset({"cost", "costs", "price", "prices", "charge", "charges", "fee", "fees"}),
    ),
    (
        re.compile(
            r"\bhow (?:long|soon|often)\b|\bhow many (?:days|weeks|months|years|hours|minutes)\b",
            re.I,
        ),
        "duration",
        frozenset({"long", "soon", "often", "last", "take", "takes"}),
    ),
    (
        re.compile(r"\bhow (?:many|much|far|old|big|tall|high)\b", re.I),
        "number",
        frozenset({"far", "old", "big", "tall", "high"}),
    ),
    (
        re.compile(r"\bwhat time\b|\bopening (?:hours|times)\b|\bwhen\b.*\bopen\b", re.I),
        "time",
        frozenset({"time"}),
    ),
    (
        re.compile(r"^\s*(?:in )?what year\b|^\s*when\b|\bwhich year\b|\bwhat date\b", re.I),
        "date",
        frozenset({"year", "date"}),
    ),
    (re.compile(r"^\s*(?:who|whom)\b|\bwhose\b|\bwhich person\b", re.I), "person", frozenset()),
    (
        re.compile(r"^\s*where\b|\b(?:what|which) (?:city|town|country|state|county)\b", re.I),
        "place",
        frozenset(),
    ),
    (re.compile(r"^\s*why\b", re.I), "reason", frozenset()),
    (
        re.compile(
            r"^\s*(?:is|are|was|were|do|does|did|can|could|has|have|had|should|will)\b", re.I
        ),
        "yesno",
        frozenset(),
    ),
]

# "What is the warranty on ...", "Which magazine ...": the thing asked for comes first
_FOCUS = re.compile(
    r"^\s*(?:what|which)\s+(?:(?:is|are|was|were)\s+)?(?:the\s+|a\s+|an\s+)?([\w'-]+)", re.I
)

_NUMBER_WORDS = (
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety "
    "hundred thousand million billion half dozen once twice"
).split()
_NUM = r"(?:\d[\d,.]*|" + "|".join(_NUMBER_WORDS) + r")"
_UNIT_PATTERNS: dict[str, re.Pattern[str]] = {
    "weight": re.compile(
        rf"\b{_NUM}\s*(?:kg|g|grams?|kilo(?:gram)?s?|lbs?|pounds|oz|ounces)\b", re.I
    ),
    "amount": re.compile(
        rf"[£$€]\s?\d|\b{_NUM}\s*(?:pounds|dollars|euros|pence|p)\b|\bfree\b", re.I
    ),
    "duration": re.compile(
        rf"\b{_NUM}(?:\s+or\s+{_NUM})?(?:\s+to\s+{_NUM})?\s+(?:working\s+|business\s+)?"
        r"(?:seconds?|minutes?|hours?|days?|nights?|weeks?|fortnights?|months?|years?|seasons?)\b"
        r"|\blifetime\b|\bovernight\b",
        re.I,
    ),
    "number": re.compile(rf"\b{_NUM}\b", re.I),
    "reason": re.compile(
        r"\b(?:because|since|so|as a result|due to|therefore|which means|otherwise|to prevent|"
        r"in order to)\b|:",
        re.I,
    ),
    "time": re.compile(r"\b\d{1,2}(?::\d{2})?\s*(?:am|pm)\b|\b\d{1,2}:\d{2}\b", re.I),
    "exception": re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt|Iteration)\b"),
    "version": re.compile(
        r"\b(?:version|python|release)\s+v?\d+\.\d+\b|\bv?[1-9]\d?\.\d{1,2}(?:\.\d+)?\b", re.I
    ),
    # a value: a number, a literal, a quoted string or a name=value of a signature
    "default": re.compile(
        rf"\b{_NUM}\b|\b(?:None|True|False|empty)\b|['\"][^'\"]*['\"]|\w=\S", re.I
    ),
    "date": re.compile(
        r"\b(?:1[5-9]\d\d|20\d\d)s?\b|\b(?:january|february|march|april|may|june|july|august|"
        r"september|october|november|december|spring|summer|autumn|winter)\b",
        re.I,
    ),
}


@dataclass(frozen=True)
class QuestionProfile:
    """A question taken apart (see the module docstring)."""

    text: str
    terms: list[str]
    entities: list[str]
    parts: list[str]
    answer_type: str | None
    stems: frozenset[str] = frozenset()
    focus: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()
    negated: tuple[str, ...] = ()  # terms it negates ("cannot be determined": "determined")

    @property
    def is_multi_part(self) -> bool:
        return len(self.parts) > 1


# a later part that refers back to the first part's subject ("..., and which PEP describes it?")
_BACK_REFERENCE = re.compile(r"\b(?:it|its|they|them|their)\b", re.IGNORECASE)


# "In which Python version were <f-strings> added": after the question word and
# its auxiliary, the words up to the verb (a participle or a verb questions end on)
_SUBJECT = re.compile(
    r"^\s*(?:\w+\s+)?(?:what|which|when|where|why|how|who)\b[^,?]*?\s"
    r"(?:is|are|was|were|does|do|did|has|have|had)\s+(?:(?:the|a|an)\s+)?"
    r"(?P<subject>[^,?()]+?)\s*(?:\([^)]*\)\s*)?"
    r"\b(?:\w+ed|\w+en|do|mean|return|raise|use|need|take|work|contain|accept|require|"
    r"support|handle|call|cost|weigh|say|go|come|run|hold|keep|make|get|give|show)\b",
    re.IGNORECASE,
)


# "What exception is raised when ...": the thing asked for is the subject, and a later "it" is
# that answer ("..., and which class does it derive from?"), not a name of the first part
_ANSWER_IS_SUBJECT = re.compile(
    r"^\s*(?:what|which)\b(?:\s+[\w-]+){0,3}?\s+(?:is|are|was|were)\s+\w+(?:ed|en)\b", re.I
)


def answer_is_subject(clause: str) -> bool:
    """Whether a question clause asks for its own subject ("What exception is raised when
    ..."), so that a later "it" is the answer, not a name the clause gives."""
    return _ANSWER_IS_SUBJECT.match(clause) is not None


def refers_back(clause: str) -> bool:
    """Whether a clause says "it", "its", "they", "them" or "their"."""
    return _BACK_REFERENCE.search(clause) is not None


def subject_phrase(clause: str) -> list[str]:
    """The subject of a question clause ("f-strings" in "In which Python version were f-strings
    (formatted string literals) added"), as a one-element list, or [] when
    the clause is not shaped "question word ... auxiliary subject verb"."""
    match = _SUBJECT.match(clause)
    subject = match["subject"].strip() if match else ""
    return [subject] if content_terms(subject) else []


def question_parts(question: str) -> list[str]:
    """The clauses of a multi-part question (a one-element list for a simple one). A later
    clause that says "it" or "them" gets the names of the nearest clause before it that gives
    any (its code names, else its subject, else its other names; none when that clause asks
    for its subject: "What exception is raised ..."), in brackets ("which PEP describes it
    (typing.Self)", "which PEP specifies them (assignment expressions)"), so that it is
    searched and checked for its own subject, not for any PEP."""
    parts = [p.strip(" ,") for p in CLAUSE_SPLIT.split(question.strip()) if content_terms(p)]
    if len(parts) < 2:
        return parts or [question.strip()]
    names: list[str] = []
    resolved = []
    for i, part in enumerate(parts):
        own = clause_names(part)
        if i and refers_back(part):
            missing = [n for n in names if n.lower() not in part.lower()]
            if missing:
                part = f"{part.rstrip('?')} ({', '.join(dict.fromkeys(missing))})"
        resolved.append(part)
        if own is not None:
            names = own
    return resolved


def clause_names(clause: str) -> list[str] | None:
    """The names a later "it" may stand for: the clause's code names, else its subject, else
    its other names (the most specific first: names in "which Python version ..." ask, they
    are not asked of); ``[]`` when it asks for its subject ("What exception is raised ...":
    "it" is then the answer); None when it names nothing of its own (a clause that says "it"
    itself names only its code names: "PEP" in "which PEP describes it" is asked for)."""
    if answer_is_subject(clause):
        return []
    if refers_back(clause):
        return code_names(clause) or None
    names = code_names(clause) or subject_phrase(clause) or entity_phrases(clause)
    return names or None


def profile(question: str) -> QuestionProfile:
    """Take a question apart (see :class:`QuestionProfile`)."""
    answer_type: str | None = None
    cue_words: frozenset[str] = frozenset()
    for pattern, kind, words in _TYPE_CUES:
        if pattern.search(question):
            answer_type, cue_words = kind, words
            break
    identifiers = code_names(question)
    if answer_type is None and _CONSTANT.search(question):  # "What is pickle.HIGHEST_PROTOCOL?"
        answer_type = "default"
    terms = [t for t in content_terms(question) if t not in cue_words]
    focus = _FOCUS.match(question)
    focus_terms = content_terms(focus[1]) if focus else []
    entities = entity_phrases(question)
    referent = _REFERENT.search(question) if refers_back(question) else None
    if referent:  # what "it" stands for is a name the answer must be about
        entities = list(dict.fromkeys([*entities, referent[1]]))
        focus_terms += content_terms(referent[1])
    return QuestionProfile(
        text=question,
        terms=terms,
        entities=entities,
        parts=question_parts(question),
        answer_type=answer_type,
        stems=frozenset(stem(t) for t in terms),
        focus=tuple(dict.fromkeys(t for t in focus_terms if t in terms and not is_generic(t))),
        identifiers=tuple(identifiers),
        negated=negated_terms(question, terms),
    )


# "cannot be determined", "is not supported", "isn't set": a state the documents may name with
# a negative prefix ("undetermined", "unsupported", "unset")
_NEGATED = re.compile(
    r"(?:\b(?:not|cannot|never)|n't)\s+(?:(?:be|been|being)\s+)?([a-z]{3,})\b", re.IGNORECASE
)


def negated_terms(question: str, terms: list[str]) -> tuple[str, ...]:
    """The question's terms that it negates (``determined`` in "cannot be determined")."""
    negated = (m[1].lower() for m in _NEGATED.finditer(question))
    return tuple(dict.fromkeys(t for t in negated if t in terms))


# the names question_parts gives a later part for its "it" ("... describes it (typing.Self)")
_REFERENT = re.compile(r"\(([^()]+)\)\s*\??\s*$")


# "What is pickle.DEFAULT_PROTOCOL?": a constant's question asks for its value
_CONSTANT = re.compile(
    r"^\s*(?i:what (?:is|are|was))\b.*\b(?:[a-z_]\w*\.)?[A-Z][A-Z0-9]*_[A-Z0-9_]+\b"
)
# a file ("Source code: Lib/timeit.py") is not an API
_FILE_NAME = re.compile(r"\.(?:py[cdiw]?|html?|txt|rst|md|cfg|ini|toml|c|h|so|dll|exe)$", re.I)
_TITLED = re.compile(r"(?:^|:\s)([\w.]+) [—–-] ")  # "configparser — Configuration file parser"


def _titled(text: str) -> list[str]:
    """The names that documentation titles and headings give as "name — what it is"."""
    return _TITLED.findall(text)


def _answer_key(found: str) -> str:
    """What identifies an exception's name or a version ("Python 3.11" and "version 3.11" are
    one version)."""
    number = re.search(r"\d+\.\d+(?:\.\d+)?", found)
    return number[0] if number else found.lower()


def gives_answer_type(answer_type: str | None, sentence: str, question: str = "") -> bool:
    """Whether ``sentence`` holds something of the kind the question asks for. Persons and
    places are capitalised names the question does not already contain; a yes/no question (and
    one with no type) accepts any sentence."""
    if answer_type is None or answer_type == "yesno":
        return True
    pattern = _UNIT_PATTERNS.get(answer_type)
    if answer_type == "api":  # a code name the question does not already give
        asked = {n.lower() for n in code_names(question)} | set(tokenize(question))
        names = [*code_names(sentence), *_titled(sentence)]
        return any(n.lower() not in asked and not _FILE_NAME.search(n) for n in names)
    if pattern is not None and answer_type in ("exception", "version"):
        named = {_answer_key(m) for m in pattern.findall(question)}  # it must say another one
        return any(_answer_key(m) not in named for m in pattern.findall(sentence))
    if pattern is not None:
        return bool(pattern.search(sentence))
    asked = {t for e in entity_phrases(question) for t in tokenize(e)} | set(tokenize(question))
    return any(not set(tokenize(e)) <= asked for e in entity_phrases(sentence))
