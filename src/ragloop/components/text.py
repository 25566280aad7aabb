"""Small text utilities shared by the LLM-free components: tokens, stopwords, entities."""

from __future__ import annotations

import re
import threading

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


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens (letters and digits; inner apostrophes kept)."""
    return [t.lower().replace("’", "'") for t in _TOKEN.findall(text)]


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


def count_tokens(text: str) -> int:
    """An estimate of model tokens: words and punctuation marks (close to word pieces for
    English prose; no tokenizer download needed)."""
    return len(_TOKEN_COUNT.findall(text))
