"""``POST /v1/chat/completions`` and ``GET /v1/models`` in OpenAI's wire format, so any OpenAI
client asks ragloop's loops.

The model name picks the engine (``ragloop-rag``, ``ragloop-agent``, ``ragloop-retrieval``;
``ragloop`` is the configured default); the question is the last user message read with the
conversation (a follow-up rewritten into a standalone question: :mod:`.conversation`), and an
extra body field ``collection`` limits the search to some of the key's collections. The answer
keeps its ``Sources:`` line, and the response carries the citations resolved to sources in a
``sources`` field (the OpenAI client keeps unknown fields: ``completion.sources``, or
``model_extra``) and the run in ``ragloop`` (run id, stop reason, trace URL). With ``stream:
true`` the loop's events go out as chunks with an empty delta and the event in ``ragloop``,
then the answer as content, then a chunk with ``finish_reason: "stop"`` and the ``sources``,
then ``data: [DONE]``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ragloop.observability.events import LoopEvent
from ragloop.server import errors
from ragloop.server.access import CallerDep
from ragloop.server.conversation import Rewrite, Turn, rewrite_meta
from ragloop.server.disconnect import unless_disconnected
from ragloop.server.schemas import UnicodeText
from ragloop.server.service import ENGINE_NAMES, Outcome, Service, chat_text

PREFIX = "ragloop"
WORD_TOKENS = re.compile(r"\w+|[^\w\s]")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatRequest(UnicodeText):
    """The fields ragloop reads; the others OpenAI defines (temperature, ...) are accepted and
    have no effect on a loop."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage]
    stream: bool = False
    stream_options: StreamOptions | None = None
    collection: str | list[str] | None = Field(
        default=None, description="ragloop's: search only these of the key's collections."
    )


def engine_of(model: str, default: str) -> str:
    """The engine a model name picks: ``ragloop-<engine>``, ``<engine>`` or ``ragloop``."""
    name = model.strip().lower()
    if name == PREFIX:
        return default
    name = name.removeprefix(f"{PREFIX}-")
    if name not in ENGINE_NAMES:
        names = ", ".join([PREFIX, *(f"{PREFIX}-{e}" for e in ENGINE_NAMES)])
        message = f"model {model!r} does not exist; use one of: {names}"
        raise errors.Refusal(404, message, code="model_not_found")
    return name


def text_of(message: ChatMessage) -> str:
    """A message's text (the text parts of a list of parts)."""
    if isinstance(message.content, str):
        return message.content
    parts = [p.get("text", "") for p in message.content or [] if p.get("type") == "text"]
    return "\n".join(str(p) for p in parts)


def question_of(messages: list[ChatMessage]) -> str:
    """The last user message's text."""
    for message in reversed(messages):
        if message.role == "user":
            return text_of(message)
    raise errors.Refusal(400, "messages: give at least one user message", code="invalid_request")


def count_tokens(text: str) -> int:
    """Tokens as a word tokenizer counts them (words and punctuation marks): what ``usage``
    reports when the loop ran without a model that counts its own."""
    return len(WORD_TOKENS.findall(text))


def add_routes(app: FastAPI, service: Service) -> None:
    default = service.settings.engine.default

    @app.get("/v1/models", tags=["openai"])
    def models(caller: CallerDep) -> dict[str, Any]:
        """The engines, as OpenAI models."""
        names = [PREFIX, *(f"{PREFIX}-{e}" for e in ENGINE_NAMES)]
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "ragloop"} for n in names]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions", tags=["openai"])
    async def chat(request: Request, body: ChatRequest, caller: CallerDep) -> Response:
        """Ask a loop in OpenAI's chat completions format (streamed with ``stream: true``)."""
        kind = engine_of(body.model, default)
        service.check_question(question_of(body.messages), "messages (the last user message)")
        turns = [Turn(m.role, text_of(m)) for m in body.messages]
        rewrite = await service.standalone(caller, turns)  # its model call holds a slot too
        meta = rewrite_meta(rewrite, content=service.settings.traces.content)
        events = service.run(caller, kind, rewrite.question, collections=body.collection, meta=meta)
        first = await events.__anext__()  # a refused request gets its status, not a stream
        if not isinstance(first, LoopEvent):  # a run starts with its run_started event
            raise RuntimeError("the run ended before it started")
        prompt = "\n".join(t.text for t in turns)
        completion = Completion(
            body.model, first.run_id, rewrite, prompt, model_counts=service.model is not None
        )
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(
                completion.chunks(first, events, usage), media_type="text/event-stream"
            )

        async def finish() -> Outcome:
            item: LoopEvent | Outcome = first
            while isinstance(item, LoopEvent):
                item = await events.__anext__()
            return item

        outcome = await unless_disconnected(request, finish())
        if isinstance(outcome, Response):  # the client went away: its run was cancelled
            return outcome
        return JSONResponse(completion.whole(outcome))


class Completion:
    """One chat completion's JSON, whole or in chunks."""

    def __init__(
        self, model: str, run_id: str, rewrite: Rewrite, prompt: str, *, model_counts: bool
    ) -> None:
        self.model = model
        self.id = f"chatcmpl-{run_id}"
        self.created = int(time.time())
        self.rewrite = rewrite
        self.prompt = prompt
        self.model_counts = model_counts  # False: no model ran, whatever usage says

    def _base(self, kind: Literal["chat.completion", "chat.completion.chunk"]) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def _extras(self, outcome: Outcome) -> dict[str, Any]:
        result = outcome.result
        return {
            "sources": outcome.citations,
            "ragloop": {
                "run_id": result.run_id,
                "question": result.query,  # what the loop answered: the follow-up rewritten
                "followup": self.rewrite.followup,
                "rewritten_by": self.rewrite.by,
                "stop_reason": result.stop_reason.value,
                "iterations": result.iterations,
                "confident": result.confident,
                "probability": result.probability,
                "gaps": result.gaps.model_dump(mode="json") if result.gaps else None,
                "trace_url": f"/v1/traces/{result.run_id}",
                "usage_counted_by": "model" if self._model_usage(result) else "tokenizer",
            },
        }

    def _model_usage(self, result: Any) -> tuple[int, int] | None:
        """The tokens the model calls reported (the rewrite's and the run's), if any."""
        if not self.model_counts:
            return None
        reported = [u for u in (self.rewrite.usage, result.usage) if u is not None]
        if not reported or not any(u.total_tokens for u in reported):
            return None
        return sum(u.input_tokens for u in reported), sum(u.output_tokens for u in reported)

    def _usage(self, result: Any) -> dict[str, int]:
        counted = self._model_usage(result)
        if counted is None:  # no model, or one that counts nothing: count the words
            answer = getattr(result, "answer", None) or ""
            counted = (count_tokens(self.prompt), count_tokens(answer))
        prompt, completion = counted
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def whole(self, outcome: Outcome) -> dict[str, Any]:
        answer = chat_text(outcome.result)
        return {
            **self._base("chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": self._usage(outcome.result),
            **self._extras(outcome),
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        data = {**self._base("chat.completion.chunk"), "choices": [choice], **extra}
        return f"data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"

    async def chunks(
        self, first: LoopEvent, events: AsyncGenerator[LoopEvent | Outcome, None], usage: bool
    ) -> AsyncIterator[str]:
        yield self._chunk({"role": "assistant", "content": ""})
        item: LoopEvent | Outcome = first
        try:
            while isinstance(item, LoopEvent):
                yield self._chunk({}, ragloop={"event": item.model_dump(mode="json")})
                item = await events.__anext__()
        except Exception as error:  # the run raised: end the stream with OpenAI's error chunk
            problem = errors.problem_of(error) or errors.Problem(
                500, str(error) or type(error).__name__, "server_error"
            )
            data = errors.openai_error(problem)
            yield f"data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"
            return
        finally:
            await events.aclose()
        yield self._chunk({"content": chat_text(item.result)})
        yield self._chunk({}, "stop", **self._extras(item))
        if usage:
            data = {
                **self._base("chat.completion.chunk"),
                "choices": [],
                "usage": self._usage(item.result),
            }
            yield f"data: {json.dumps(data)}\n\n"
        yield "data: [DONE]\n\n"
