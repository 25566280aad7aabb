from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, BeforeValidator

from ragloop import Parsed, ParseFailure, parse_llm_json
from ragloop.core.jsonparse import (
    LenientBool,
    StrList,
    UnitScore,
    extract_json_object,
    lenient_bool,
    lenient_enum,
    str_list,
    unit_score,
    validate_llm_object,
)


class Color(StrEnum):
    RED = "red"
    DARK_BLUE = "dark_blue"


class Verdict(BaseModel):
    ok: LenientBool
    score: UnitScore
    items: StrList = []
    color: Annotated[Color, BeforeValidator(lenient_enum(Color))] = Color.RED


@pytest.mark.parametrize(
    "text",
    [
        '{"ok": true, "score": 0.5}',
        '```json\n{"ok": true, "score": 0.5}\n```',
        '```\n{"ok": true, "score": 0.5}\n```',
        'Sure! Here is my verdict:\n{"ok": true, "score": 0.5}\nHope that helps.',
        'Thinking {about it}... then {"ok": true, "score": 0.5}',
        '{"ok": true, "score": 0.5,}',
        "{'ok': True, 'score': 0.5}",
        '[{"ok": true, "score": 0.5}]',
        '{"OK": true, "Score": 0.5}',
        'A 5" screen, "quoted" prose, then {"ok": true, "score": 0.5}',
    ],
)
def test_extracts_the_object_from_common_reply_shapes(text):
    parsed = parse_llm_json(text, Verdict)
    assert isinstance(parsed, Parsed)
    assert parsed.value.ok is True
    assert parsed.value.score == 0.5


def test_nested_braces_and_braces_in_strings():
    text = 'x {"ok": true, "score": 1, "items": ["a {b}", "}"], "meta": {"n": {"m": 1}}} y'
    parsed = parse_llm_json(text, Verdict)
    assert isinstance(parsed, Parsed)
    assert parsed.value.items == ["a {b}", "}"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("false", False),
        ("False", False),
        ("true", True),
        ("yes", True),
        ("no", False),
        ("0", False),
        ("1", True),
        (None, False),
        (0, False),
        (1, True),
    ],
)
def test_lenient_bool(value, expected):
    assert lenient_bool(value) is expected


def test_lenient_bool_rejects_other_text():
    with pytest.raises(ValueError, match="boolean"):
        lenient_bool("maybe")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.5, 0.5),
        (7, 1.0),
        (-3, 0.0),
        ("0.8", 0.8),
        ("80%", 0.8),
        ("8/10", 0.8),
        (" 0.25 ", 0.25),
        (1.7, 1.0),
    ],
)
def test_unit_score_clamps_and_reads_numeric_text(value, expected):
    assert unit_score(value) == pytest.approx(expected)


@pytest.mark.parametrize("value", [None, True, "high", "1/0", float("nan"), [0.5]])
def test_unit_score_rejects_non_numbers(value):
    with pytest.raises(ValueError, match="score"):
        unit_score(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("abc", ["abc"]),  # one item, never split into characters
        (["a", " b ", ""], ["a", "b"]),
        (None, []),
        ([1, 2.5, True, None], ["1", "2.5"]),
        ([{"query": "q1"}, {"text": "q2"}], ["q1", "q2"]),
        ("", []),
    ],
)
def test_str_list(value, expected):
    assert str_list(value) == expected


def test_str_list_rejects_a_number():
    with pytest.raises(ValueError, match="list"):
        str_list(3)


@pytest.mark.parametrize("value", ["dark_blue", "Dark Blue", "DARK-BLUE", "DARK_BLUE", "darkBlue"])
def test_enum_values_ignore_case_spaces_and_hyphens(value):
    parsed = parse_llm_json(f'{{"ok": 1, "score": 1, "color": "{value}"}}', Verdict)
    assert isinstance(parsed, Parsed)
    assert parsed.value.color is Color.DARK_BLUE


def test_camel_and_spaced_keys_match_fields():
    class Flags(BaseModel):
        is_grounded: LenientBool

    for key in ("isGrounded", "is grounded", "Is-Grounded"):
        parsed = parse_llm_json(f'{{"{key}": "true"}}', Flags)
        assert isinstance(parsed, Parsed)
        assert parsed.value.is_grounded


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty reply"),
        ("   ", "empty reply"),
        ("no json here", "no JSON object"),
        ('{"ok": tru', "malformed"),
        ('{"ok": true}', "score"),  # missing required field
        ('{"ok": true, "score": null}', "score"),
        ('{"ok": true, "score": "high"}', "score"),
        ("[1, 2, 3]", "no JSON object"),
    ],
)
def test_failures_are_typed_results_with_a_reason(text, reason):
    result = parse_llm_json(text, Verdict)
    assert isinstance(result, ParseFailure)
    assert reason in result.reason
    assert result.raw == text


def test_non_text_input_is_a_failure_not_an_exception():
    result = parse_llm_json(None, Verdict)
    assert isinstance(result, ParseFailure)
    assert "NoneType" in result.reason


def test_excerpt_is_bounded_and_single_line():
    failure = ParseFailure("x", "word\n" * 500)
    assert len(failure.excerpt(50)) == 50
    assert "\n" not in failure.excerpt()


def test_extract_json_object_returns_a_dict():
    assert extract_json_object('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}


def test_deeply_nested_input_does_not_crash():
    text = "{" * 5000 + "}" * 5000
    assert isinstance(parse_llm_json(text, Verdict), ParseFailure)


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_never_raises_on_arbitrary_text(text):
    result = parse_llm_json(text, Verdict)
    assert isinstance(result, Parsed | ParseFailure)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["ok", "score", "items", "color", "x"]), json_values))
def test_never_raises_on_arbitrary_objects_and_scores_stay_in_range(data):
    import json

    text = json.dumps(data)
    result = parse_llm_json(f"Verdict:\n```json\n{text}\n```", Verdict)
    assert isinstance(result, Parsed | ParseFailure)
    if isinstance(result, Parsed):
        assert 0.0 <= result.value.score <= 1.0
        assert all(isinstance(item, str) and item for item in result.value.items)


class _Args(BaseModel):
    query: str | None = None
    limit: int | None = None


def test_validate_llm_object_matches_keys_and_reports_failures():
    parsed = validate_llm_object({"Query": "refunds", "LIMIT": "7"}, _Args)
    assert isinstance(parsed, Parsed)
    assert parsed.value == _Args(query="refunds", limit=7)
    failed = validate_llm_object({"query": 3}, _Args)
    assert isinstance(failed, ParseFailure)
    assert failed.reason == "query: Input should be a valid string"
    assert failed.raw == "{'query': 3}"
