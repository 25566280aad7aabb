"""The text primitives every layer uses: tokens, stems, stopwords, entities, sentences and the
units of a passage (prose, table rows, code), token counts."""

from __future__ import annotations

import functools
import json
import re
import threading
from dataclasses import dataclass
from importlib import resources

import Stemmer

_TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_CAPITALISED = re.compile(r"[A-Z][\w'’\-.&]*")
_NUMBER = re.compile(r"^\d[\d.,:/-]*$")

STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each either else ever few for from further get gets got had
    hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him
    himself his how how's however i i'd i'll i'm i've if in into is isn't it it's its itself just
    let's me might more most much must mustn't my myself neither no nor not now of off on once only
    or other ought our ours ourselves out over own per please same shall shan't she she'd she'll
    she's should shouldn't so some such than that that's the their theirs them themselves then
    there there's these they they'd they'll they're they've this those though through to too
    under until up upon us very via was wasn't we we'd we'll we're we've were weren't what what's
    whatever when when's whenever where where's whereas wherever whether which while who who's whom
    whose why why's will with within without won't would wouldn't yes yet you you'd you'll you're
    you've your yours yourself yourselves one ones tell know find give many
    """.split()
)

QUESTION_WORDS = frozenset("what which who whom whose when where why how".split())


@functools.cache
def _general_vocabulary() -> frozenset[str]:
    """The whole words of the MiniLM WordPiece vocabulary (about 22,000 words of general
    English that the tokenizer keeps whole); empty if the vocabulary cannot be read."""
    path = resources.files("ragloop.kb.embedding") / "models" / "minilm-tokenizer.json"
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()
    return frozenset(w for w in vocab if w.isalpha() and not w.startswith("##"))


def is_common_word(word: str) -> bool:
    """Whether a word is everyday English (kept whole by a general-purpose tokenizer:
    "policy", "abroad", "happens") rather than a name or jargon split into pieces ("bitcoin",
    "django", "memoize"). Without the vocabulary every word counts as common."""
    vocabulary = _general_vocabulary()
    return not vocabulary or word.lower() in vocabulary


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens (letters and digits; inner apostrophes kept)."""
    if text.isascii():  # lower-casing the whole text keeps every token as it was, faster
        return _TOKEN.findall(text.lower())
    return [t.lower().replace("’", "'") for t in _TOKEN.findall(text)]


def says_word(text: str, word: str) -> bool:
    """Whether ``text`` has ``word`` as written: the same letters, not another inflection,
    and the same case when ``word`` has a capital (the ``Self`` of ``typing.Self`` is not the
    ``self`` of a method)."""
    flags = 0 if any(c.isupper() for c in word) else re.IGNORECASE
    return re.search(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", text, flags) is not None


def is_content_word(token: str) -> bool:
    return token not in STOPWORDS and (len(token) > 1 or token.isdigit())


def content_terms(text: str) -> list[str]:
    """The text's non-stopword tokens, first occurrence order, without repeats."""
    seen: set[str] = set()
    out: list[str] = []
    for token in tokenize(text):
        if is_content_word(token) and token not in seen:
            seen.add(token)
            out.append(token)
    return out


_stemmers = threading.local()


def stem_words(words: list[str]) -> list[str]:
    """English Snowball stems (PyStemmer, in C); one stemmer per thread, as they are not
    thread-safe."""
    stemmer = getattr(_stemmers, "stemmer", None)
    if stemmer is None:
        stemmer = _stemmers.stemmer = Stemmer.Stemmer("english")
    return list(stemmer.stemWords(words))


def stem(token: str) -> str:
    """The English Snowball stem of a token."""
    return stem_words([token])[0]


def content_stems(text: str) -> set[str]:
    """The stems of the text's content terms (for matching words across inflections)."""
    return {stem(t) for t in content_terms(text)}


def normalize_query(query: str) -> str:
    """The form used to tell whether two queries are the same: case, spacing and end
    punctuation do not count."""
    return " ".join(query.casefold().split()).strip(" ?.!,;:")


def is_number(token: str) -> bool:
    return bool(_NUMBER.match(token))


_CONNECTORS = frozenset({"of", "the", "de", "for", "van", "von", "da", "del", "la"})


def entity_phrases(text: str) -> list[str]:
    """Runs of capitalised words, a cheap stand-in for named entities.

    A capitalised word that starts a sentence counts only when the run continues ("Scott
    Derrickson") or it is not a stopword ("Paris is ..."). Connectors such as "of" may join
    two capitalised words ("Bank of America"). Quoted titles are kept whole.
    """
    phrases: list[str] = [q.strip() for q in re.findall(r"[\"“]([^\"”]{2,80})[\"”]", text)]
    words = re.findall(r"\S+", text)
    run: list[str] = []
    sentence_start = True

    def flush() -> None:
        while run and run[-1].lower() in _CONNECTORS:
            run.pop()
        if run:
            single = len(run) == 1
            word = run[0].lower()
            if not (single and (word in STOPWORDS or word in QUESTION_WORDS)):
                phrase = " ".join(run)
                if phrase not in phrases:
                    phrases.append(phrase)
        run.clear()

    for raw in words:
        word = raw.strip("\"“”'‘’()[]{},;:!?")
        ends_sentence = raw.rstrip("\"”')]").endswith((".", "?", "!"))
        word = word.rstrip(".")
        opens_sentence = sentence_start and not run and word.lower() in STOPWORDS
        capitalised = bool(word) and bool(_CAPITALISED.fullmatch(word)) and not opens_sentence
        # a number continues a name ("Skylark 2", "Apollo 11")
        numbered = bool(run) and bool(word) and word[0].isdigit() and len(word) <= 5
        if capitalised or numbered or (run and word.lower() in _CONNECTORS):
            run.append(word)
        else:
            flush()
        if ends_sentence or raw.endswith((",", ";", ":")):
            flush()
        sentence_start = ends_sentence
    flush()
    return phrases


# Sentence ends: ., ! or ? followed by space and an upper-case letter, digit or quote; common
# abbreviations ("e.g.", "Dr.", initials) do not end a sentence.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e inc ltd co corp fig no approx dept est".split()
)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])([\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])")
_TOKEN_COUNT = re.compile(r"\w+|[^\w\s]")


def split_sentences(text: str) -> list[str]:
    """Sentences of a text (a rule-based splitter: good on prose, no model needed)."""
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_BREAK.finditer(text):
        candidate = text[start : match.start() + len(match[1])].strip()
        last_word = candidate.rsplit(None, 1)[-1] if candidate else ""
        last_word = last_word.lower().strip("\"')]").rstrip(".!?")
        initial = len(last_word) == 1 and last_word.isalpha()
        dotted = "." in last_word and not last_word[-1].isdigit()  # "U.S.", not "£4.95"
        if last_word in _ABBREVIATIONS or initial or dotted:
            continue
        if candidate:
            sentences.append(candidate)
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


_LIST_ITEM = re.compile(r"^\s*(?:[-*•+]|\d+[.)])\s+", re.MULTILINE)


def sentence_units(text: str) -> list[str]:
    """The sentences of a passage, with paragraphs, lines of a list and table rows kept apart
    (``split_sentences`` alone would join a list's items into one sentence)."""
    units: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        if len(lines) > 1 and any(_LIST_ITEM.match(line) or "|" in line for line in lines):
            pieces = [_LIST_ITEM.sub("", line).strip() for line in lines]
        else:
            pieces = [" ".join(line.strip() for line in lines)]
        for piece in pieces:
            units.extend(s for s in split_sentences(piece) if s.strip())
    return units


# Code names: `quoted`, --options, dotted.names, snake_case, call(), name=value, CamelCase
_CODE_NAME = re.compile(
    r"`([^`\n]{1,80})`"
    r"|(?<![\w-])(--?[A-Za-z][\w-]*[A-Za-z0-9])"
    r"|([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+(?:\(\))?)"
    r"|([A-Za-z_]\w*=[\w.'\"-]+)"
    r"|(\b[A-Za-z]\w*_\w+|\b_\w+|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z0-9]+[A-Z]\w*|\b\w+\(\))"
)


def code_names(text: str) -> list[str]:
    """The names of code a text mentions (``json.loads``, ``lru_cache``, ``maxsize=None``,
    ``--system-site-packages``, ``ThreadPoolExecutor``, anything in backticks), without call
    parentheses or surrounding punctuation, first occurrence order."""
    out: list[str] = []
    for match in _CODE_NAME.finditer(text):
        name = next(g for g in match.groups() if g).strip().removesuffix("()").rstrip(".,;:")
        if len(name) > 1 and name not in out and not name.replace(".", "").isdigit():
            out.append(name)
    return out


_COMPOUND = re.compile(r"\b[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+\b")


def loose_stems(text: str) -> set[str]:
    """The stems a text has only inside compound names (``strict`` in ``strict_timestamps``):
    a question asking about ``strict`` is not answered by them."""
    compounds = _COMPOUND.findall(text)
    if not compounds:
        return set()
    inside = {
        stem(t) for c in compounds for t in tokenize(c.replace("_", " ")) if is_content_word(t)
    }
    return inside - content_stems(_COMPOUND.sub(" ", text))


@dataclass(frozen=True)
class PassageUnit:
    """A quotable piece of a passage: a sentence, a table row read with its header, or a
    piece of code (a doctest example with its output, or a code block), with the heading it
    sits under inside the passage ("" if none)."""

    kind: str  # "prose" | "row" | "code"
    text: str
    heading: str = ""


_FENCE = re.compile(r"^\s*(```|~~~)")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
MAX_CODE_CHARS = 400


def passage_units(text: str) -> list[PassageUnit]:
    """The units of a passage (see :class:`PassageUnit`): prose split into sentences
    (:func:`sentence_units`), tables row by row, with their header when a markdown rule
    marks one ("Level: ERROR; Numeric value: 40"), fenced code blocks and doctest examples
    as code, and the markdown headings inside the passage kept as the heading of what
    follows them."""
    units: list[PassageUnit] = []
    heading = ""
    for kind, block in _blocks(text.replace("¶", "")):
        if kind == "code":
            units.extend(PassageUnit("code", piece, heading) for piece in _code_pieces(block))
            continue
        lines = [line for line in block.splitlines() if line.strip()]
        while lines and _MD_HEADING.match(lines[0]):
            heading = _MD_HEADING.match(lines[0])[1]  # type: ignore[index]
            lines = lines[1:]
        if not lines:
            continue
        if _is_table(lines):
            units.extend(PassageUnit("row", row, heading) for row in _table_rows(lines))
        elif _is_code(lines):
            units.extend(PassageUnit("code", p, heading) for p in _code_pieces("\n".join(lines)))
        else:  # a rule left here is a one-column table's, or a line across the page
            prose = "\n".join(line for line in lines if not _TABLE_RULE.match(line))
            units.extend(PassageUnit("prose", s, heading) for s in sentence_units(prose))
    return units


def _blocks(text: str) -> list[tuple[str, str]]:
    """Paragraphs (split at blank lines) and fenced code blocks (kept whole)."""
    out: list[tuple[str, str]] = []
    paragraph: list[str] = []
    code: list[str] | None = None
    for line in text.splitlines():
        if code is not None:
            if _FENCE.match(line):
                out.append(("code", "\n".join(code)))
                code = None
            else:
                code.append(line)
        elif _FENCE.match(line):
            if paragraph:
                out.append(("text", "\n".join(paragraph)))
                paragraph = []
            code = []
        elif line.strip():
            paragraph.append(line)
        elif paragraph:
            out.append(("text", "\n".join(paragraph)))
            paragraph = []
    if code is not None:  # an unclosed fence: the code runs to the end of the passage
        out.append(("code", "\n".join(code)))
    if paragraph:
        out.append(("text", "\n".join(paragraph)))
    return out


_CODE_LINE = re.compile(
    r"^\s*(?:>>>|\.\.\.|#|@|def |class |import |from \w|return\b|if .*:$|for .*:$|"
    r"while .*:$|with .*:$|try:|except\b|else:|elif |raise |yield |print\(|"
    r"[\w.\[\]]+\s*[+\-*/]?=\s|[})\]]+;?$)"
)


def _is_table(lines: list[str]) -> bool:
    """Rows of cells split by ``|`` (markdown or plain), every row with as many cells."""
    if len(lines) < 2 or not all("|" in line for line in lines):
        return False
    rows = [line for line in lines if not _TABLE_RULE.match(line)]
    return len({len(_cells(row)) for row in rows}) == 1 and len(_cells(rows[0])) > 1


def _is_code(lines: list[str]) -> bool:
    """A doctest, or lines that mostly look like code (indented blocks, statements, comments)
    rather than sentences."""
    if lines[0].lstrip().startswith(">>>"):
        return True
    if len(lines) < 2:
        return False
    code = sum(bool(_CODE_LINE.match(line)) or line.startswith(("    ", "\t")) for line in lines)
    prose = sum(line.rstrip().endswith((".", "?", "!")) and " " in line.strip() for line in lines)
    return code >= 0.6 * len(lines) and prose < 0.5 * len(lines)


def _code_pieces(code: str) -> list[str]:
    """Doctest examples one by one (each ``>>>`` statement with its continuation and output),
    other code in pieces of at most ``MAX_CODE_CHARS`` cut at line ends."""
    lines = [line.rstrip() for line in code.splitlines() if line.strip()]
    pieces: list[list[str]] = []
    for line in lines:
        starts = line.lstrip().startswith(">>>")
        if not pieces or starts or sum(len(x) + 1 for x in pieces[-1]) + len(line) > MAX_CODE_CHARS:
            pieces.append([])
        pieces[-1].append(line)
    return ["\n".join(p) for p in pieces if "".join(p).strip()]


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _table_rows(lines: list[str]) -> list[str]:
    """A table's rows, each read with its header ("Level: ERROR; Numeric value: 40") when it
    has one: a first row with a markdown rule under it, as markdown writes a header and the
    readers write the header row of an HTML table. Without a rule there is no header, and
    each row is its cells alone ("asyncio.CancelledError; Raised when a Task is cancelled."):
    the first row of an API list is an entry like the others, not the name of a column."""
    has_header = len(lines) > 1 and bool(_TABLE_RULE.match(lines[1]))
    rows = [line for line in lines if not _TABLE_RULE.match(line)]
    header = _cells(rows[0]) if has_header else []
    out = []
    for row in rows[1:] if has_header else rows:
        cells = _cells(row)
        if header and len(header) == len(cells):
            pairs = [f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True) if c]
            out.append("; ".join(pairs))
        else:
            out.append("; ".join(c for c in cells if c))
    return [row for row in out if row]


def count_tokens(text: str) -> int:
    """An estimate of model tokens: words and punctuation marks (close to word pieces for
    English prose; no tokenizer download needed)."""
    return len(_TOKEN_COUNT.findall(text))
