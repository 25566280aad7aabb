"""Exact terms: the words of a query written as code, which hybrid search puts first.

People search documentation for identifiers, error codes and options (``lru_cache``,
``maxsize=None``, ``E1234``, ``getLogger``, ``--sort-keys``). Reciprocal rank fusion lets a
chunk that only resembles the query (first by dense search, tenth by bm25) beat the one chunk
that holds the term (first by bm25, absent from the dense list). So hybrid search ranks the
fused candidates by how many of the query's exact terms they contain, then by their fused
score: a chunk holding the term comes before one that does not, and a query without such
words ranks as plain fusion.

A word is an exact term when it is written as code: snake_case or a dotted, ``=``, ``::`` name
(``os.path.join``, ``maxsize=None``), letters and digits run together (``E1234``, ``sha256``,
``utf8``, not ``1990s``, ``21st`` or ``km2``), a capital after a lower-case letter
(``getLogger``, ``OrderedDict``; not a name such as ``McBride``) or a command-line option
(``--sort-keys``). A chunk contains it when its title,
headings or text hold it case-insensitively and not as part of a longer name (``lru_cache`` is
found in ``functools.lru_cache(maxsize=None)`` but not in ``lru_cache_info``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# punctuation a word is written between in prose, not part of the term
_EDGES = "\"'`‘’“”()[]{}<>,;:!?."
_SNAKE = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]")
_JOINED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.|=|::|->)[A-Za-z0-9_\"']")
_LETTER_DIGIT = re.compile(r"[A-Za-z]\d|\d[A-Za-z]")
_NUMBER_WORD = re.compile(r"\d+(?:'?s|st|nd|rd|th)", re.IGNORECASE)  # 1990s, 21st
_INNER_CAPITAL = re.compile(r"[a-z][A-Z]")
_OPTION = re.compile(r"--?[A-Za-z][\w-]+")
_ABBREVIATION = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]?")  # e.g, U.S.
# names written with an inner capital (McBride, DiMartino, LaGuardia) and areas or volumes
# (km2, m3): on HotpotQA, putting them first lost a comparison's other entity
_SURNAME = re.compile(r"(?:Mc|Mac|O'|Di|Du|De|Da|La|Le|Van|Von|St)[A-Z][a-z]")
_UNIT = re.compile(r"[a-z]{1,2}[23]")


def is_code_word(word: str) -> bool:
    """Whether a word (edge punctuation already stripped) is written as code."""
    if len(word) < 3 or any(rule.fullmatch(word) for rule in (_ABBREVIATION, _NUMBER_WORD, _UNIT)):
        return False
    if _SURNAME.match(word) and not _SNAKE.search(word):
        return False
    return bool(
        _SNAKE.search(word)
        or _JOINED.search(word)
        or _LETTER_DIGIT.search(word)
        or _INNER_CAPITAL.search(word)
        or _OPTION.fullmatch(word)
    )


def exact_terms(query: str) -> list[str]:
    """The query's words written as code, each once, in order (``lru_cache()`` gives
    ``lru_cache``)."""
    terms: list[str] = []
    for raw in query.split():
        word = raw.strip(_EDGES)
        while word.endswith("()"):
            word = word[:-2]
        word = word.strip(_EDGES)
        if is_code_word(word) and word.casefold() not in (t.casefold() for t in terms):
            terms.append(word)
    return terms


def term_patterns(terms: Sequence[str]) -> list[re.Pattern[str]]:
    return [
        re.compile(rf"(?<![A-Za-z0-9_]){re.escape(term)}(?![A-Za-z0-9_])", re.IGNORECASE)
        for term in terms
    ]


def exact_hits(patterns: Sequence[re.Pattern[str]], text: str) -> int:
    """How many of the terms the text contains."""
    return sum(1 for pattern in patterns if pattern.search(text))
