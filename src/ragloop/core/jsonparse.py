"""Tolerant extraction of JSON objects from LLM replies, validated strictly afterwards.

Models wrap JSON in code fences, put prose around it, write Python literals, leave trailing
commas, say ``"false"`` for false and ``"Step Back"`` for ``step_back``. :func:`parse_llm_json`
accepts all of that and returns a typed result: :class:`Parsed` with a validated pydantic model,
or :class:`ParseFailure` with the reason and the raw reply. It never raises.

The lenient field types (:data:`LenientBool`, :data:`UnitScore`, :data:`StrList`,
:func:`lenient_enum`) live here too, so every parser of model output coerces values the same way:

- booleans: ``true/false``, ``"yes"/"no"``, ``"1"/"0"``, ``null`` (false);
- scores: numbers and numeric strings (``"0.8"``, ``"80%"``, ``"8/10"``), clamped to [0, 1];
- lists of strings: a lone string is one item (never split into characters), ``null`` is empty;
- enums: case, spaces and hyphens do not matter (``"Step-Back"`` is ``step_back``).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError

M = TypeVar("M", bound=BaseModel)
E = TypeVar("E", bound=Enum)

# Replies longer than this are scanned only up to here: JSON answers are short, and the scan
# must stay cheap on a model that rambles.
MAX_SCAN_CHARS = 200_000


@dataclass(frozen=True, slots=True)
class Parsed(Generic[M]):
    """A reply that parsed and validated."""

    value: M


@dataclass(frozen=True, slots=True)
class ParseFailure:
    """A reply that did not parse. ``raw`` is the reply as received (a string)."""

    reason: str
    raw: str

    def excerpt(self, limit: int = 200) -> str:
        text = " ".join(self.raw.split())
        return text if len(text) <= limit else text[: limit - 1] + "…"


# -- lenient value coercion ------------------------------------------------------------------

_TRUE = {"true", "yes", "y", "1", "t"}
_FALSE = {"false", "no", "n", "0", "f", "", "null", "none"}


def lenient_bool(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        word = value.strip().strip(".").lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise ValueError(f"not a boolean: {value!r}")


def unit_score(value: object) -> float:
    """A score clamped to [0, 1]; accepts numbers, "0.8", "80%" and "8/10"."""
    number: float
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a score: {value!r}")
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range: clamped like an infinite one
            number = math.inf if value > 0 else -math.inf
    elif isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("%"):
                number = float(text[:-1]) / 100.0
            elif "/" in text:
                num, _, den = text.partition("/")
                number = float(num) / float(den)
            else:
                number = float(text)
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"not a score: {value!r}") from None
    else:
        raise ValueError(f"not a score: {value!r}")
    if math.isnan(number):
        raise ValueError("score is NaN")
    return min(1.0, max(0.0, number))


def str_list(value: object) -> list[str]:
    """A list of non-empty strings; a lone string is one item and null is an empty list."""
    if value is None:
        return []
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ValueError(f"not a list of strings: {value!r}")
    out: list[str] = []
    for item in items:
        if isinstance(item, dict):  # [{"query": "..."}] is a common shape
            item = next((v for v in item.values() if isinstance(v, str)), None)
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            text = str(item).strip()
            if text:
                out.append(text)
    return out


def _normal_name(text: str) -> str:
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text.strip())  # camelCase -> camel_Case
    return re.sub(r"[\s\-]+", "_", text).lower()


def lenient_enum(enum_cls: type[E]) -> Callable[[object], object]:
    """A before-validator that maps a value to ``enum_cls`` ignoring case, spaces, hyphens."""
    by_name = {_normal_name(m.name): m for m in enum_cls}
    by_value = {_normal_name(str(m.value)): m for m in enum_cls}

    def coerce(value: object) -> object:
        if isinstance(value, str):
            key = _normal_name(value)
            return by_value.get(key) or by_name.get(key) or value
        return value

    return coerce


LenientBool = Annotated[bool, BeforeValidator(lenient_bool)]
UnitScore = Annotated[float, BeforeValidator(unit_score)]
StrList = Annotated[list[str], BeforeValidator(str_list)]


# -- extraction ------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_PY_LITERAL_TOKENS = re.compile(r"(\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*')|\b(true|false|null)\b")
_PY_LITERALS = {"true": "True", "false": "False", "null": "None"}


class _Strings:
    """Where a scan of JSON text, one character at a time, is inside a string (escapes
    honoured): the one lexing rule both scans below share."""

    def __init__(self) -> None:
        self.in_string = False
        self.escaped = False

    def open(self) -> None:
        self.in_string = True

    def inside(self, ch: str) -> bool:
        """Whether ``ch`` belongs to an open string (its closing quote included)."""
        if not self.in_string:
            return False
        if self.escaped:
            self.escaped = False
        elif ch == "\\":
            self.escaped = True
        elif ch == '"':
            self.in_string = False
        return True


def _object_spans(text: str) -> list[str]:
    """Top-level ``{...}`` spans in order, skipping braces inside JSON strings."""
    spans: list[str] = []
    depth = 0
    start = 0
    strings = _Strings()
    for i, ch in enumerate(text):
        if strings.inside(ch):
            continue
        if ch == '"' and depth > 0:  # quotes in prose outside an object are ignored
            strings.open()
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def _as_python_literal(span: str) -> str:
    return _PY_LITERAL_TOKENS.sub(
        lambda m: m.group(1) if m.group(1) else _PY_LITERALS[m.group(2)], span
    )


def _load(candidate: str) -> object:
    """Parse one candidate: strict JSON, then JSON without trailing commas, then Python."""
    attempts: list[Callable[[], object]] = [
        lambda: json.loads(candidate),
        lambda: json.loads(_TRAILING_COMMA.sub(r"\1", candidate)),
        lambda: _json_values(ast.literal_eval(_as_python_literal(candidate))),
    ]
    for attempt in attempts:
        try:
            return attempt()
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            continue
    return None


def _json_values(value: object) -> object:
    """A Python literal as the JSON it stands for: keys as strings, tuples and sets as lists,
    anything else that JSON cannot hold (bytes, complex numbers) as its text, so what a
    model wrote as ``{1: 2}`` can travel on the wire again (``{"1": 2}``)."""
    if isinstance(value, dict):
        return {_json_key(k): _json_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_values(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _json_key(key: object) -> str:
    if isinstance(key, str):
        return key
    return json.dumps(key) if isinstance(key, int | float | bool) or key is None else str(key)


def _first_object(value: object) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return value[0]
    return None


def extract_json_object(text: object) -> dict[str, Any] | ParseFailure:
    """The first JSON object in an LLM reply, or a :class:`ParseFailure` saying why not."""
    if not isinstance(text, str):
        return ParseFailure(f"reply is {type(text).__name__}, not text", repr(text))
    scanned = text[:MAX_SCAN_CHARS]
    candidates = [m.group(1) for m in _FENCE.finditer(scanned)] + [scanned]
    for candidate in candidates:
        found = _first_object(_load(candidate.strip()))
        if found is not None:
            return found
        for span in _object_spans(candidate):
            found = _first_object(_load(span))
            if found is not None:
                return found
    if not scanned.strip():
        return ParseFailure("empty reply", text)
    if "{" not in scanned:
        return ParseFailure("no JSON object in reply", text)
    return ParseFailure("malformed JSON object in reply", text)


def _match_keys(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Map keys like "Score", "is grounded" or "isGrounded" to the model's field names."""
    fields = {_normal_name(name): name for name in model.model_fields}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = fields.get(_normal_name(str(key)), str(key))
        out.setdefault(name, value)
    return out


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors()[:3]:
        where = ".".join(str(p) for p in item["loc"]) or "reply"
        problems.append(f"{where}: {item['msg']}")
    return "; ".join(problems)


def validate_llm_object(data: dict[str, Any], model: type[M]) -> Parsed[M] | ParseFailure:
    """Validate an object a model wrote (tool-call arguments, say) as ``model``, with the same
    key matching and lenient types as :func:`parse_llm_json`. Never raises."""
    try:
        return Parsed(model.model_validate(_match_keys(data, model)))
    except ValidationError as error:
        return ParseFailure(_describe(error), repr(data))


# How far back from the end of a cut reply :func:`close_cut_json` looks for a place to cut.
_CUT_POINTS_TRIED = 64
_CLOSERS = {"{": "}", "[": "]"}


def close_cut_json(text: str) -> dict[str, Any] | None:
    """The object a reply cut off mid-JSON (by its token bound) holds so far, or None.

    The reply is read from its first ``{``; it is closed where it stops (an open string
    closed, open arrays and objects closed), or else at the last place before that where a
    member or an item ended, dropping the part written after it (a number at the very end may
    be cut short, so it is dropped too). ``{"answer": "Paris is the cap`` reads as
    ``{"answer": "Paris is the cap"}``; ``{"answer": "Paris", "confid`` as ``{"answer":
    "Paris"}``.
    """
    start = text.find("{", 0, MAX_SCAN_CHARS)
    if start < 0:
        return None
    stack: list[str] = []
    strings = _Strings()
    cuts: list[tuple[int, str]] = []  # (end of the kept prefix, what closes it)
    body = text[start:MAX_SCAN_CHARS]
    for i, ch in enumerate(body):
        if strings.inside(ch):
            continue
        if ch == '"':
            strings.open()
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch in "}]" and stack:
            stack.pop()
            if not stack:
                break  # a whole object: nothing was cut inside it
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch == ",":
            cuts.append((i, "".join(reversed(stack))))
    else:
        # where the reply stops, unless it stops inside a number, which may be cut short
        if strings.in_string or not re.search(r"[\d.eE+-]$", body.rstrip()):
            end = len(body) - 1 if strings.escaped else len(body)  # drop a lone escape character
            cuts.append((end, ('"' if strings.in_string else "") + "".join(reversed(stack))))
    for end, closer in reversed(cuts[-_CUT_POINTS_TRIED:]):
        found = _first_object(_load(body[:end] + closer))
        if found is not None:
            return found
    return None


def parse_llm_json(text: object, model: type[M], *, cut: bool = False) -> Parsed[M] | ParseFailure:
    """Extract a JSON object from ``text`` and validate it as ``model``. Never raises.

    ``cut=True`` says the reply was cut by its token bound (``finish_reason == "length"``):
    when it does not parse whole, it is read as far as it goes (:func:`close_cut_json`), and
    the fields it had not reached yet take their defaults.
    """
    found = extract_json_object(text)
    if isinstance(found, ParseFailure):
        closed = close_cut_json(text) if cut and isinstance(text, str) else None
        if closed is None:
            return found
        found = closed
    checked = validate_llm_object(found, model)
    if isinstance(checked, ParseFailure):
        reason = (
            f"{checked.reason} (the reply was cut by its token bound)" if cut else checked.reason
        )
        return ParseFailure(reason, text if isinstance(text, str) else repr(text))
    return checked
