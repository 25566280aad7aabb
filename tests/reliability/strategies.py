"""Hypothesis strategies for untrusted input: what a model, a wire or a file may hold."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

# Numbers at the edges (huge integers, infinities, NaN) are where coercion breaks.
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=40))
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=24,
)
TRICKY_TEXT = st.sampled_from(
    [
        "",
        "{",
        "}{",
        "```json\n{",
        '{"a": 1,}',
        "{'a': True}",
        "[" * 2000,
        "{" * 3000 + "}" * 3000,
        '{"score": "8/0"}',
        '{"score": "nan"}',
        '{"score": 1e999}',
        "\x00\ud7ff\ufffd",
        "```\n```\n```",
    ]
)


def objects(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects whose keys are mostly the fields a parser expects (in any case or
    spelling), with values of any type."""
    key = st.one_of(
        st.sampled_from(keys),
        st.sampled_from(keys).map(str.upper),
        st.sampled_from(keys).map(lambda k: k.replace("_", " ")),
        st.text(max_size=12),
    )
    return st.dictionaries(key, JSON_VALUES, max_size=len(keys) + 2)


def _dumps(value: object) -> str:
    return json.dumps(value, allow_nan=True, default=str)


def _mutate(text: str, draw: st.DrawFn) -> str:
    if not text:
        return text
    at = draw(st.integers(0, len(text) - 1))
    action = draw(st.sampled_from(["cut", "drop", "dup", "insert"]))
    if action == "cut":
        return text[:at]
    if action == "drop":
        return text[:at] + text[at + 1 :]
    if action == "dup":
        return text[:at] + text[at:] * 2
    return text[:at] + draw(st.sampled_from(list("{}[]\",:'`\\"))) + text[at:]


@st.composite
def llm_replies(draw: st.DrawFn, keys: list[str]) -> str:
    """A reply a model might write when asked for a JSON object with ``keys``: valid, wrapped
    in fences or prose, Python-literal style, truncated or corrupted, or anything at all."""
    obj = draw(objects(keys))
    shape = draw(
        st.sampled_from(["json", "fenced", "prose", "python", "list", "mutated", "text", "tricky"])
    )
    if shape == "json":
        return _dumps(obj)
    if shape == "fenced":
        return f"```json\n{_dumps(obj)}\n```"
    if shape == "prose":
        return f"{draw(st.text(max_size=30))} {_dumps(obj)} {draw(st.text(max_size=30))}"
    if shape == "python":
        return repr(obj)
    if shape == "list":
        return _dumps([obj, draw(JSON_VALUES)])
    if shape == "mutated":
        return _mutate(_dumps(obj), draw)
    if shape == "tricky":
        return draw(TRICKY_TEXT)
    return draw(st.text())
