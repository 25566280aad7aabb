"""What the HTTP API takes and returns (the OpenAPI schema at /openapi.json is made from these)."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.responses import JSONResponse

from ragloop.components.citations import Citation
from ragloop.core.budget import Budget, BudgetSpend
from ragloop.core.records import Chunk, Usage
from ragloop.core.records.gaps import EvidenceGaps
from ragloop.kb.knowledge_base import Document
from ragloop.kb.metadata import public_metadata
from ragloop.observability.staleness import StaleSource

EngineName = Literal["rag", "agent", "retrieval"]
Collections = str | list[str] | None


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate_at(data: Any, where: str = "the body") -> str | None:
    """Where in a request's JSON a lone surrogate sits (``"\\ud800"`` is valid JSON but no
    Unicode text: nothing downstream can encode it), or None."""
    if isinstance(data, str):
        return where if LONE_SURROGATE.search(data) else None
    if isinstance(data, dict):
        for key, value in data.items():
            name = where if not (isinstance(key, str) and key.isascii()) else key
            if where != "the body":
                name = f"{where}.{name}"
            found = lone_surrogate_at(key, f"a key of {where}") or lone_surrogate_at(value, name)
            if found:
                return found
    if isinstance(data, list):
        for n, item in enumerate(data):
            found = lone_surrogate_at(item, f"{where}[{n}]")
            if found:
                return found
    return None


class UnicodeText(BaseModel):
    """A request whose text is all Unicode: a lone surrogate anywhere in it is a 422 naming the
    field, checked once before the fields are (every request model derives from this one)."""

    @model_validator(mode="before")
    @classmethod
    def _no_lone_surrogates(cls, data: Any) -> Any:
        found = lone_surrogate_at(data)
        if found is not None:
            raise ValueError(
                f"{found}: holds a lone surrogate (an unpaired \\ud800-\\udfff escape), "
                "which is not Unicode text; send valid UTF-8"
            )
        return data


class SafeJSONResponse(JSONResponse):
    """JSON that always encodes: text that is not Unicode (a lone surrogate a validation error
    echoes) goes out escaped, a number JSON has no word for (``Infinity``, which Python's json
    module sends) as a string, instead of failing as a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:  # UnicodeEncodeError included
            return json.dumps(_finite(content), separators=(",", ":")).encode("ascii")


def _finite(data: Any) -> Any:
    if isinstance(data, float) and not math.isfinite(data):
        return str(data)
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


class _Request(UnicodeText):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Request):
    query: str = Field(description="What to search for.")
    top_k: int = Field(default=5, ge=1, le=100)
    collection: Collections = Field(default=None, description="A name or a list (default: all).")
    mode: Literal["bm25", "dense", "hybrid"] = "hybrid"


class ChunkOut(BaseModel):
    """A chunk as the API shows it."""

    id: str
    source: str
    title: str | None = None
    collection: str | None = None
    score: float
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, chunk: Chunk) -> ChunkOut:
        title = chunk.metadata.get("title")
        collection = chunk.metadata.get("collection")
        return cls(
            id=chunk.id,
            source=chunk.source,
            title=title if isinstance(title, str) else None,
            collection=collection if isinstance(collection, str) else None,
            score=round(chunk.score, 6),
            text=chunk.content,
            metadata={
                k: v
                for k, v in public_metadata(chunk.metadata).items()
                if k not in ("title", "collection")
            },
        )


class SearchResponse(BaseModel):
    chunks: list[ChunkOut]


class HistoryTurn(_Request):
    """One earlier message of a conversation: what the user asked, or what was answered."""

    role: Literal["user", "assistant"]
    content: str


class AskRequest(_Request):
    question: str
    history: list[HistoryTurn] = Field(
        default_factory=list,
        max_length=100,
        description='The conversation before the question, oldest first: a follow-up ("and '
        'what does it weigh?") is read with it and rewritten into a question that stands '
        "alone, as /v1/chat/completions does; the answer's `question` is what ran.",
    )
    engine: EngineName | None = Field(default=None, description="Default: the config's.")
    collection: Collections = None
    max_iterations: int | None = Field(default=None, ge=1, le=50)
    top_k: int | None = Field(default=None, ge=1, le=100)
    target_precision: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Stand by an answer only when its calibrated chance of being right reaches "
        "this (default: the config's, else the engine's).",
    )
    budget: Budget | None = Field(default=None, description="Lowered to the server's caps.")
    stream: bool = Field(
        default=False, description="Answer with text/event-stream (as Accept: text/event-stream)."
    )


class RetrieveRequest(_Request):
    question: str
    collection: Collections = None
    max_iterations: int | None = Field(default=None, ge=1, le=50)
    top_k: int | None = Field(default=None, ge=1, le=100)
    budget: Budget | None = None
    stream: bool = False


class AskResponse(BaseModel):
    """A finished run: its answer with the citations resolved to sources, why it stopped, what
    it used; ``trace_url`` shows every step; ``confident``, ``probability`` and, when not
    confident, ``gaps``: how far to trust it and why."""

    run_id: str
    engine: str
    question: str
    answer: str | None = Field(
        description="What the run answers; when it is not confident, evidence first: that no "
        "sure answer was found, then the closest passages, best first (`gaps` in full)."
    )
    attempt: str | None = Field(
        default=None,
        description="When the run is not confident: the best answer it came to, which it "
        "does not stand by.",
    )
    citations: list[Citation]
    stop_reason: str
    outcome: str
    iterations: int
    chunks: list[ChunkOut]
    budget_used: BudgetSpend
    usage: Usage | None = None
    error: str | None = None
    trace_url: str
    confident: bool = Field(description="Whether the run stands by its answer.")
    probability: float | None = Field(
        default=None, description="The calibrated chance that the answer is right."
    )
    target_precision: float | None = None
    gaps: EvidenceGaps | None = Field(
        default=None,
        description="What was found and what was not, when the answer is not confident.",
    )
    followup: str | None = Field(
        default=None,
        description="The words asked, when `history` made them a question that stands alone "
        "(`question`); None when they were run as they are.",
    )
    rewritten_by: Literal["model", "heuristic"] | None = None


class RetrieveResponse(BaseModel):
    """The evidence a RetrievalLoop gathered, best first."""

    run_id: str
    question: str
    stop_reason: str
    outcome: str
    iterations: int
    chunks: list[ChunkOut]
    budget_used: BudgetSpend
    error: str | None = None
    trace_url: str


class DocumentsRequest(_Request):
    documents: list[Document] = Field(min_length=1)
    collection: str = "default"


class IngestResponse(BaseModel):
    added: int
    updated: int
    unchanged: int
    skipped: list[tuple[str, str]]
    chunks_added: int


class DeleteResponse(BaseModel):
    removed: int


class Shared(BaseModel):
    """Where what several servers of one knowledge base could share lives: ``postgresql``
    (every server of the database), ``file`` (the processes that open one file, on one host),
    ``process`` (this server process only)."""

    traces: Literal["postgresql", "file"] = Field(
        description="Stored runs: readable from every server (postgresql) or from the "
        "processes that open the same trace file."
    )
    concurrency: Literal["postgresql", "process"] = Field(
        description="The per-key limit of runs at once: counted across every server of the "
        "database, or per process (each worker and each server its own count)."
    )
    query_vectors: Literal["postgresql", "process"] = Field(
        description="The cache of embedded queries: shared by every server, or per process."
    )


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    auth: bool = Field(description="Whether requests need an API key.")
    engines: list[str]
    knowledge_base: str
    workers: int = Field(description="The processes `ragloop serve` runs on this host.")
    shared: Shared


class DocumentOut(BaseModel):
    """A stored document as ``GET /v1/documents`` lists it."""

    source: str = Field(description="What DELETE /v1/documents?source= removes.")
    title: str
    collection: str


class TraceOut(BaseModel):
    """A stored run as ``GET /v1/traces`` lists it: its summary (no events; ``trace_url``
    has them) and the documents its answer cites that changed since it ran."""

    id: str
    engine: str
    started_at: float
    finished_at: float | None
    question: str | None
    answer: str | None
    stop_reason: str | None
    iterations: int
    trace_url: str
    stale: list[StaleSource] = Field(
        description="The cited documents edited or removed since the run: empty when its "
        "answer still reads the documents as they are."
    )


class TracesPage(BaseModel):
    """The newest runs a key asked (an admin: every run), newest first."""

    traces: list[TraceOut]


class DocumentsPage(BaseModel):
    """One page of the documents a key may read, by collection then source."""

    documents: list[DocumentOut]
    total: int = Field(description="How many documents there are in all pages.")
    offset: int
    limit: int
    collection: str | None = Field(description="The collection listed (None: every one).")
    admin: bool = Field(description="Whether this key may add and delete documents.")
