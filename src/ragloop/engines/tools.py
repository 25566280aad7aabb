"""The agent loop's built-in tools: their schemas, the collection scope, and the search itself.

The collection scope shapes the ``search`` schema *and* is enforced when the search runs:

| ``collections``        | schema                          | the search gets                  |
|------------------------|---------------------------------|----------------------------------|
| None                   | query, limit                    | no collection (unrestricted)     |
| ``"a"`` or ``["a"]``   | query, limit                    | ``collection="a"``, always       |
| ``["a", "b"]``         | query, limit, collection (enum) | ``collection=`` the pick, or     |
|                        |                                 | ``collections=["a", "b"]``       |
| ``[]``                 | query, limit                    | never called: no results         |

A collection outside the list is a tool error the controller reads; it never reaches the search.
A chunk whose ``metadata["collection"]`` names a collection outside the search's target is
dropped from the results, so a search function that ignores its arguments cannot leak either.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ragloop.components.llm.prompts import fence
from ragloop.core.calls import call, has_method, method
from ragloop.core.errors import ComponentError, ConfigError
from ragloop.core.jsonparse import ParseFailure, validate_llm_object
from ragloop.core.records import Chunk, Tool
from ragloop.core.text import normalize_query

SEARCH = "search"
ANSWER = "answer"
GIVE_UP = "give_up"
BUILTIN_TOOLS = frozenset({SEARCH, ANSWER, GIVE_UP})

SHOWN_PER_SEARCH = 5  # chunks whose full text a search result shows
DEFAULT_LIMIT = 5
MAX_LIMIT = 100


@dataclass(frozen=True)
class SearchTarget:
    """Where one search runs: one collection, several, anywhere, or nowhere."""

    collection: str | None = None
    collections: tuple[str, ...] | None = None
    nothing: bool = False

    def kwargs(self) -> dict[str, Any]:
        if self.collection is not None:
            return {"collection": self.collection}
        if self.collections is not None:
            return {"collections": list(self.collections)}
        return {}

    @property
    def label(self) -> str | None:
        """The data source, for telemetry."""
        if self.collection is not None:
            return self.collection
        return ",".join(self.collections) if self.collections else None

    def admits(self, chunk: Chunk) -> bool:
        """False for a chunk tagged with a collection outside this target."""
        tag = chunk.metadata.get("collection")
        if tag is None or (self.collection is None and self.collections is None):
            return True
        allowed = {self.collection} if self.collection is not None else set(self.collections or ())
        return tag in allowed


@dataclass(frozen=True)
class CollectionScope:
    """The collections a loop may search: None (unrestricted), none, one (locked) or a pick."""

    allowed: tuple[str, ...] | None

    @classmethod
    def of(cls, collections: str | Sequence[str] | None) -> CollectionScope:
        if collections is None:
            return cls(None)
        names = [collections] if isinstance(collections, str) else list(collections)
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise ConfigError("collections", f"must be non-empty strings, got {name!r}")
        return cls(tuple(dict.fromkeys(names)))

    @property
    def choices(self) -> list[str] | None:
        """The collections the controller picks from (two or more), else None."""
        return list(self.allowed) if self.allowed is not None and len(self.allowed) > 1 else None

    def target(self, requested: object) -> SearchTarget | str:
        """Where a search asked for collection ``requested`` (as the model wrote it, None when
        left out) runs, or the error the controller reads. The only place scope is decided."""
        if self.allowed is None:
            return SearchTarget()
        if not self.allowed:
            return SearchTarget(nothing=True)
        if len(self.allowed) == 1:
            return SearchTarget(collection=self.allowed[0])  # the lock wins over any argument
        if requested is None:
            return SearchTarget(collections=self.allowed)
        if isinstance(requested, str) and requested in self.allowed:
            return SearchTarget(collection=requested)
        allowed = ", ".join(self.allowed)
        return (
            f"search error: collection {json.dumps(requested, default=str)} is not in the "
            f"allowed list ({allowed}); pick one of them or leave collection out to search all"
        )


# -- schemas ------------------------------------------------------------------------------------


def builtin_tools(scope: CollectionScope) -> list[Tool]:
    """``search``, ``answer`` and ``give_up``, with ``search`` shaped by the scope."""
    properties: dict[str, Any] = {
        "query": {
            "type": "string",
            "description": "A focused search query (rewrite vague questions first).",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LIMIT,
            "default": DEFAULT_LIMIT,
            "description": "How many chunks to fetch.",
        },
    }
    description = (
        "Search the knowledge base for chunks relevant to a query. Returns the full text of the "
        f"top {SHOWN_PER_SEARCH} chunks, each after its chunk id. Use it only for questions the "
        "knowledge base can answer, and never run the same query twice."
    )
    if scope.choices:
        names = ", ".join(scope.choices)
        properties["collection"] = {
            "type": "string",
            "enum": scope.choices,
            "description": f"Search only this collection ({names}); leave out to search all.",
        }
        description += f" Available collections: {names}."
    return [
        Tool(
            name=SEARCH,
            description=description,
            parameters={"type": "object", "properties": properties, "required": ["query"]},
        ),
        Tool(
            name=ANSWER,
            description=(
                "Give the final answer and end the loop. Call it as soon as the chunks you have "
                "answer the question, and not before you have searched."
            ),
            parameters={
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The answer."}},
                "required": ["text"],
            },
        ),
        Tool(
            name=GIVE_UP,
            description=(
                "Say the question cannot be answered from the knowledge base, and end the loop. "
                "Call it only after a few honest searches found nothing useful."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "description": "What is missing."},
                    "closest": {
                        "type": "string",
                        "description": (
                            "Optional: the nearest answer the chunks do support, with its "
                            "[n] markers; it is shown as not an answer."
                        ),
                    },
                },
                "required": ["reason"],
            },
        ),
    ]


def tool_set(
    tools: Sequence[Tool | str] | None, scope: CollectionScope
) -> tuple[list[Tool], dict[str, Tool]]:
    """The tools a loop offers its controller, and the custom ones among them by name.

    ``None`` is the three built-ins. A list that names a built-in (as a string, or as a
    :class:`~ragloop.Tool` without a callback, e.g. from ``AgentLoop.default_tools()``) is the
    whole set, as Arcana's ``tools:`` is: built-ins left out are removed, and a built-in given as
    a Tool keeps its schema (shaped by the collections) with the description given. A list that
    names none adds its tools to the built-ins. A set with neither ``answer`` nor ``give_up``
    gives the controller no tool to end the loop with, and is refused.
    """
    builtins = {tool.name: tool for tool in builtin_tools(scope)}
    if tools is None:
        return list(builtins.values()), {}
    if isinstance(tools, str | Tool):
        raise ConfigError("tools", "must be a list of tools")
    given = list(tools)
    if not any(_builtin_name(tool) for tool in given):
        given = [*builtins.values(), *given]
    chosen: dict[str, Tool] = {}
    custom: dict[str, Tool] = {}
    for item in given:
        name = _builtin_name(item)
        if name is not None:
            tool = builtins[name]
            if isinstance(item, Tool) and item.description:
                tool = tool.model_copy(update={"description": item.description})
        elif isinstance(item, Tool):
            if item.name in BUILTIN_TOOLS:
                raise ConfigError(
                    "tools",
                    f"{item.name!r} is built in and takes no callback (to search another way, "
                    "pass search=; custom tools need names of their own)",
                )
            if item.callback is None:
                raise ConfigError("tools", f"tool {item.name!r} has no callback")
            tool = custom[item.name] = item
        else:
            raise ConfigError(
                "tools",
                f"must be ragloop.Tool objects or the names {sorted(BUILTIN_TOOLS)}, got {item!r}",
            )
        if tool.name in chosen:
            raise ConfigError("tools", f"tool name {tool.name!r} is already taken")
        chosen[tool.name] = tool
    if ANSWER not in chosen and GIVE_UP not in chosen:
        raise ConfigError(
            "tools",
            "the set has neither answer nor give_up, so the controller could never end the "
            "loop; keep at least one of them",
        )
    return list(chosen.values()), custom


def _builtin_name(item: object) -> str | None:
    """The built-in a ``tools`` entry selects (a name, or a Tool of that name with no
    callback), else None."""
    if isinstance(item, str):
        if item not in BUILTIN_TOOLS:
            raise ConfigError(
                "tools",
                f"{item!r} is not a built-in tool ({', '.join(sorted(BUILTIN_TOOLS))}); give "
                "other tools as ragloop.Tool with a callback",
            )
        return item
    if isinstance(item, Tool) and item.name in BUILTIN_TOOLS and item.callback is None:
        return item.name
    return None


# -- search arguments ---------------------------------------------------------------------------


class _SearchArgs(BaseModel):
    query: str | None = None
    limit: int | None = None
    collection: Any = None  # checked by the scope, never by its type alone


@dataclass(frozen=True)
class SearchRequest:
    query: str
    limit: int
    target: SearchTarget

    @property
    def key(self) -> tuple[str, str | None]:
        """What makes two searches the same (for the duplicate guard)."""
        return normalize_query(self.query), self.target.label


def search_request(arguments: dict[str, Any], scope: CollectionScope) -> SearchRequest | str:
    """Validate a search call's arguments: the request, or the error the controller reads."""
    parsed = validate_llm_object(arguments, _SearchArgs)
    if isinstance(parsed, ParseFailure):
        return f"search error: bad arguments ({parsed.reason})"
    args = parsed.value
    if args.query is None:
        return "search error: missing query argument"
    if not args.query.strip():
        return "search error: the query is empty"
    limit = DEFAULT_LIMIT if args.limit is None else min(MAX_LIMIT, max(1, args.limit))
    target = scope.target(args.collection)
    if isinstance(target, str):
        return target
    return SearchRequest(query=args.query.strip(), limit=limit, target=target)


def format_results(chunks: list[Chunk]) -> str:
    """The text the controller reads: "Found N chunks. Top K:", then each chunk's id, its
    retrieval score and its full text, fenced as data."""
    if not chunks:
        return "No results."
    top = chunks[:SHOWN_PER_SEARCH]
    parts = [f"Found {len(chunks)} chunks. Top {len(top)}:"]
    parts += [
        f"{i}. [{c.id}] (score {c.score:.3f})\n{fence('chunk', c.content)}"
        for i, c in enumerate(top, 1)
    ]
    return "\n\n".join(parts)


# -- the search backend -------------------------------------------------------------------------


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        return True
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class SearchBackend:
    """Runs searches on a retriever (``retrieve(query, top_k)`` / ``aretrieve``) or a function
    ``search(query, *, limit, collection=None, collections=None)``, inside the scope.

    ``options`` (Arcana's ``search_opts``) are passed to every search as keyword arguments; they
    may set the limit, never the collections (the scope decides those)."""

    def __init__(
        self, search: object, scope: CollectionScope, options: Mapping[str, Any] | None = None
    ) -> None:
        if has_method(search, "retrieve"):
            self.fn = method(search, "retrieve", "retriever")
            self.limit_name = "top_k"
        elif callable(search):
            self.fn = search
            self.limit_name = "limit"
        else:
            raise ConfigError(
                "search",
                "search must be a retriever (retrieve/aretrieve) or a function "
                f"search(query, *, limit, collection=None, collections=None); got {type(search)}",
            )
        needed: list[str] = []
        if scope.allowed:
            needed = ["collections", "collection"] if scope.choices else ["collection"]
        for name in needed:
            if not _accepts(self.fn, name):
                raise ConfigError(
                    "collections",
                    f"the search {getattr(self.fn, '__qualname__', self.fn)!r} takes no "
                    f"{name}= argument, so it cannot be scoped to collections",
                )
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(
                "search_opts", f"must be a mapping of keyword arguments, got {options!r}"
            )
        self.options = dict(options or {})
        for name in self.options:
            if name in ("collection", "collections"):
                raise ConfigError("search_opts", f"{name} is set by collections=, not here")
            if not isinstance(name, str) or not _accepts(self.fn, name):
                raise ConfigError(
                    "search_opts",
                    f"the search {getattr(self.fn, '__qualname__', self.fn)!r} takes no "
                    f"{name}= argument",
                )

    async def __call__(self, request: SearchRequest) -> list[Chunk]:
        if request.target.nothing:
            return []
        kwargs = {self.limit_name: request.limit, **self.options, **request.target.kwargs()}
        found = await call(self.fn, request.query, **kwargs)
        if not isinstance(found, list | tuple) or not all(isinstance(c, Chunk) for c in found):
            raise ComponentError(
                f"search returned {type(found).__name__}; expected a list of ragloop.Chunk"
            )
        return [c for c in found if request.target.admits(c)]
