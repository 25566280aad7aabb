"""Which query words are exact terms, and when a text holds one."""

from __future__ import annotations

import pytest

from ragloop.kb.index.exact import exact_hits, exact_terms, term_patterns


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        (
            "What happens when functools.lru_cache is given maxsize=None?",
            ["functools.lru_cache", "maxsize=None"],
        ),
        ("error E1234 on startup", ["E1234"]),
        ("how do I call lru_cache()", ["lru_cache"]),
        ("logging.getLogger vs getLogger", ["logging.getLogger", "getLogger"]),
        ("json.tool --sort-keys option", ["json.tool", "--sort-keys"]),
        ("sha256 and utf8 and word399_7", ["sha256", "utf8", "word399_7"]),
        ("OrderedDict or ThreadPoolExecutor, says McDonald", ["OrderedDict", "ThreadPoolExecutor"]),
        # prose: abbreviations, decades, ordinals, capitalised and hyphenated words are not code
        ("Which U.S. band of the 1990s, e.g. Nirvana, won in the 21st year?", []),
        ("Is the well-known Ford brand from New York, NY, 40 km2 wide?", []),
    ],
)
def test_exact_terms_are_words_written_as_code(query, terms):
    assert exact_terms(query) == terms


def test_a_term_is_held_whole_and_case_insensitively():
    patterns = term_patterns(["lru_cache", "maxsize=None"])
    assert exact_hits(patterns, "@functools.lru_cache(maxsize=None)") == 2
    assert exact_hits(patterns, "Use LRU_CACHE here") == 1
    assert exact_hits(patterns, "lru_cache_info and maxsize=NoneType") == 0
