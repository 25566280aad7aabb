"""Prompts that fit the model's context window, with room for the reply.

The window is the model's ``context_window`` (configured, or read from the server by the
provider's ``adiscover_context_window``); unknown, nothing is cut. The reply keeps its bound
(at most half the window), a few tokens go to the chat template, and the prompt gets the rest:

- retrieved chunks are kept in rank order and dropped from the bottom; the last one that fits
  in part is cut at a word;
- an answer under judgement keeps at most a third of the room;
- a loop's history keeps its latest attempts, the older ones summarised by the queries they
  tried; a conversation keeps its system prompt, question and latest turn, older tool results
  give way first;
- the question is never cut: a prompt that does not fit even without evidence is sent as it
  is, and the server's refusal reaches the loop as :class:`~ragloop.ContextOverflowError`.

Sizes are estimated, not counted (the model's tokenizer is on the server): one token per 3.5
ASCII letters or spaces, per 2 punctuation marks and per digit (Llama's and Gemma's tokenizers
split numbers into digits, and markup, JSON and escaped text are mostly punctuation), and one
per other character. That errs on the large side for prose, code, JSON and numbers in most
tokenizers (measured against Gemma 3's). When a server still refuses a prompt as too long,
naming the real sizes, :func:`ask_fitted` fits it once more to those sizes.
"""

from __future__ import annotations

import json
import logging
import math
import string
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from ragloop.components.llm.prompts import fence
from ragloop.core.calls import GenerateFn, is_chat_model
from ragloop.core.errors import ContextOverflowError
from ragloop.core.limits import PromptFit, default_max_tokens, effective_max_tokens
from ragloop.core.protocols import ChatModel
from ragloop.core.records import Chunk, Message, ModelResponse, Tool
from ragloop.observability import llm

logger = logging.getLogger("ragloop")

CHARS_PER_TOKEN = 3.5  # ASCII letters and spaces
MARKS_PER_TOKEN = 2  # ASCII punctuation
_DIGITS = frozenset(string.digits)
_PUNCTUATION = frozenset(string.punctuation)
TEMPLATE_TOKENS = 32  # the chat template's tokens around a prompt
MESSAGE_TOKENS = 8  # ... and around each message of a conversation
MIN_CUT_TOKENS = 32  # a chunk cut shorter than this is left out instead
CUT_MARK = " …"

Build = Callable[[int | None], tuple[str, PromptFit]]


def estimate_tokens(text: str) -> int:
    """An estimate of ``text``'s size in tokens (see the module docstring)."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    digits = sum(c in _DIGITS for c in text)
    marks = sum(c in _PUNCTUATION for c in text)
    words = ascii_chars - digits - marks
    return (
        math.ceil(words / CHARS_PER_TOKEN)
        + math.ceil(marks / MARKS_PER_TOKEN)
        + digits
        + (len(text) - ascii_chars)
    )


def cut_text(text: str, tokens: int) -> str:
    """``text`` cut at a word to about ``tokens`` tokens, marked with " …" when cut."""
    if estimate_tokens(text) <= tokens:
        return text
    keep = max(0, int(tokens * CHARS_PER_TOKEN))
    while keep and estimate_tokens(text[:keep]) > tokens:
        keep = int(keep * 0.9)
    head = text[:keep]
    space = head.rfind(" ")
    if space > keep // 2:
        head = head[:space]
    return head.rstrip() + CUT_MARK


async def context_window_of(model: object) -> int | None:
    """The context window of a chat model: its ``context_window``, else what its
    ``adiscover_context_window()`` reads from the server, else None. A function (any
    callable, by :func:`~ragloop.core.calls.is_chat_model`'s rule) declares none."""
    if not is_chat_model(model):
        return None
    window = getattr(model, "context_window", None)
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        return window
    discover = getattr(model, "adiscover_context_window", None)
    if callable(discover):
        found = await discover()
        return found if isinstance(found, int) and found > 0 else None
    return None


def reply_tokens(model: object, role: str, max_tokens: int | None, window: int | None) -> int:
    """The reply bound of a call: the component's (else the role's default), no more than
    the model's ``max_tokens`` and, when the window is known, half of it."""
    bound = max_tokens if max_tokens is not None else default_max_tokens(role)
    cap = getattr(model, "max_tokens", None) if is_chat_model(model) else None
    bound = effective_max_tokens(bound, cap if isinstance(cap, int) else None) or bound
    return min(bound, window // 2) if window else bound


def prompt_room(window: int | None, reply: int) -> int | None:
    """Tokens left for the prompt in ``window`` after the reply and the chat template."""
    return None if window is None else max(0, window - reply - TEMPLATE_TOKENS)


# -- chunks -------------------------------------------------------------------------------------

ChunkRender = Callable[[Chunk, int], str]


def fit_chunks(
    chunks: Sequence[Chunk], room: int | None, render: ChunkRender
) -> tuple[list[Chunk], PromptFit]:
    """The chunks that fit in ``room`` tokens, in rank order: the rest are dropped from the
    bottom, and the first that does not fit whole is cut if a useful part of it fits.
    ``render(chunk, n)`` is how the prompt shows chunk number ``n``."""
    if room is None:
        return list(chunks), PromptFit(chunks_kept=len(chunks))
    kept: list[Chunk] = []
    used = 0
    cut = 0
    for n, chunk in enumerate(chunks, 1):
        cost = estimate_tokens(render(chunk, n)) + 1
        if used + cost <= room:
            kept.append(chunk)
            used += cost
            continue
        frame = estimate_tokens(render(chunk.model_copy(update={"content": ""}), n)) + 1
        space = room - used - frame
        if space >= MIN_CUT_TOKENS:
            kept.append(chunk.model_copy(update={"content": cut_text(chunk.content, space)}))
            cut = 1
        break
    dropped = len(chunks) - len(kept)
    notes = []
    if cut:
        notes.append(f"chunk {len(kept)} cut to fit the context window")
    if dropped:
        first = len(kept) + 1
        notes.append(f"chunks {first}-{len(chunks)} of {len(chunks)} left out (lowest ranked)")
    return kept, PromptFit(
        chunks_kept=len(kept), chunks_dropped=dropped, chunks_cut=cut, notes=notes
    )


def fit_chunk_prompt(
    chunks: Sequence[Chunk],
    room: int | None,
    render: ChunkRender,
    prompt: Callable[[list[Chunk], int], str],
) -> tuple[str, PromptFit]:
    """``prompt(kept, omitted)`` around the chunks that fit: the rest of the prompt (measured
    with no chunks) comes out of ``room`` first, the chunks get what is left."""
    if room is not None:
        room -= estimate_tokens(prompt([], len(chunks)))
    kept, fit = fit_chunks(chunks, room, render)
    return prompt(kept, fit.chunks_dropped), fit


# -- one prompt, fitted and sent ------------------------------------------------------------------


async def ask_fitted(
    model: GenerateFn | ChatModel,
    build: Build,
    *,
    role: str,
    max_tokens: int | None,
) -> ModelResponse:
    """Build the prompt for the room the model's window leaves (``build(room)`` returns the
    prompt and what it left out; ``room`` None means unlimited), send it with its reply bound
    (the call's record keeps the fit), and return the reply. A
    :class:`~ragloop.ContextOverflowError` naming the real sizes gets the prompt fitted once
    more to them; a second one is raised."""
    window = await context_window_of(model)
    bound = reply_tokens(model, role, max_tokens, window)
    prompt, fit = _built(build, prompt_room(window, bound), window, bound)
    try:
        return await llm.ask(model, prompt, role=role, max_tokens=bound, fit=fit)
    except ContextOverflowError as error:
        real = error.context_window or window
        if real is None:
            raise
        bound = reply_tokens(model, role, max_tokens, real)
        room = prompt_room(real, bound) or 0
        if error.prompt_tokens and fit.prompt_tokens:
            # the server counts more tokens than we estimated: shrink our room by as much
            room = int(room * min(1.0, fit.prompt_tokens / error.prompt_tokens))
        again, refit = _built(build, room, real, bound)
        if again == prompt:
            raise  # nothing left to cut: the question alone does not fit
        refit = refit.model_copy(update={"refit": True})
        logger.info("%s prompt refitted to a %d-token window after: %s", role, real, error)
        return await llm.ask(model, again, role=role, max_tokens=bound, fit=refit)


def _built(build: Build, room: int | None, window: int | None, reply: int) -> tuple[str, PromptFit]:
    prompt, fit = build(room)
    size = estimate_tokens(prompt)
    notes = list(fit.notes)
    if room is not None and size > room:
        notes.append(f"the prompt without evidence (~{size} tokens) exceeds its room ({room})")
    update = {
        "context_window": window,
        "reply_tokens": reply,
        "prompt_tokens": size,
        "notes": notes,
    }
    return prompt, fit.model_copy(update=update)


# -- conversations (the agent loop) ---------------------------------------------------------------


def _message_tokens(message: Message) -> int:
    """A message's size in the larger of the forms a provider sends it in: natively, or as the
    JSON-in-text protocol of a model without tools writes it (a tool result fenced with its
    markup escaped, a call as its JSON object), which costs more."""
    if message.role == "tool":
        size = _result_tokens(message.content) + estimate_tokens(
            fence("tool_result", "", call_id=message.tool_call_id or "")
        )
    else:
        size = estimate_tokens(message.content)
    for call in message.tool_calls:
        written = {"name": call.name, "arguments": call.arguments}
        size += estimate_tokens(json.dumps(written, ensure_ascii=False))
    return size + MESSAGE_TOKENS


def _result_tokens(text: str) -> int:
    return estimate_tokens(escape(text, quote=False))


def tools_tokens(tools: Sequence[Tool] | None) -> int:
    """The estimated size of tool definitions sent with a conversation."""
    if not tools:
        return 0
    spec: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]
    return estimate_tokens(json.dumps(spec, ensure_ascii=False))


def _cut_result(text: str, tokens: int) -> str:
    """A tool result cut from the bottom to about ``tokens``: whole paragraphs (one search
    result each) while they fit, then part of the next, its fence closed."""
    kept: list[str] = []
    used = 0
    parts = text.split("\n\n")
    for part in parts:
        cost = _result_tokens(part) + 1
        if used + cost > tokens:
            room = tokens - used
            if room >= MIN_CUT_TOKENS:
                piece = cut_text(part, room)
                if piece.count("<chunk") > piece.count("</chunk>"):
                    piece += "</chunk>"
                kept.append(piece)
            break
        kept.append(part)
        used += cost
    left = len(parts) - len(kept)
    note = f"[{left} more part(s) of this result left out to fit the context window]"
    return "\n\n".join([*kept, note])


def fit_messages(
    messages: Sequence[Message], room: int | None, tools: Sequence[Tool] | None = None
) -> tuple[list[Message], PromptFit]:
    """A conversation that fits in ``room`` tokens (tools included). The system prompt, the
    question (the first user message) and the last message stay; older tool results give way
    first, oldest first (each replaced by a line saying so), then the longest remaining one is
    cut from the bottom (a search result lists its chunks best first)."""
    out = list(messages)
    if room is None:
        return out, PromptFit()
    budget = room - tools_tokens(tools)
    sizes = [_message_tokens(m) for m in out]
    if sum(sizes) <= budget:
        return out, PromptFit()
    dropped = 0
    for i, message in enumerate(out[:-1]):
        if sum(sizes) <= budget:
            break
        if message.role == "tool" and sizes[i] > MESSAGE_TOKENS * 4:
            stub = "[this tool result was left out to fit the context window]"
            out[i] = message.model_copy(update={"content": stub})
            sizes[i] = _message_tokens(out[i])
            dropped += 1
    notes = [f"{dropped} earlier tool result(s) left out"] if dropped else []
    cut = 0
    excess = sum(sizes) - budget
    if excess > 0:
        last = len(out) - 1
        longest = max(  # a tool result, or a user message but the closing instruction
            (
                i
                for i, m in enumerate(out)
                if i > 1 and (m.role == "tool" or (m.role == "user" and i < last))
            ),
            key=sizes.__getitem__,
            default=None,
        )
        if longest is not None and sizes[longest] - excess > MIN_CUT_TOKENS:
            frame = _message_tokens(out[longest].model_copy(update={"content": ""}))
            target = sizes[longest] - excess - frame
            out[longest] = out[longest].model_copy(
                update={"content": _cut_result(out[longest].content, target)}
            )
            cut = 1
            notes.append(f"message {longest + 1} cut from the bottom")
    return out, PromptFit(history_dropped=dropped, chunks_cut=cut, notes=notes)


async def complete_fitted(
    model: Any,
    messages: list[Message],
    tools: list[Tool] | None,
    *,
    role: str,
    max_tokens: int | None,
) -> ModelResponse:
    """:func:`ragloop.observability.llm.complete` with the conversation fitted to the model's
    window (:func:`fit_messages`) and the reply bounded."""
    window = await context_window_of(model)
    bound = reply_tokens(model, role, max_tokens, window)
    room = prompt_room(window, bound)
    fitted, fit = fit_messages(messages, room, tools)
    size = sum(_message_tokens(m) for m in fitted) + tools_tokens(tools)
    fit = fit.model_copy(
        update={"context_window": window, "reply_tokens": bound, "prompt_tokens": size}
    )
    return await llm.complete(model, fitted, tools, role=role, max_tokens=bound, fit=fit)
