"""A run as a stream of its events: what every engine's ``astream()`` returns.

:func:`stream_run` starts the run in a task of its own, in the context the stream was made in
(its context variables: the run in progress it nests in, a trace's meta), with a *sink*: every
event the run (and any run nested in it) emits is put on the stream as well as emitted as
usual, with its content whatever the capture setting, since a stream goes to whoever asked.
Events are the same :class:`~ragloop.LoopEvent` records that listeners, logs and stored traces
get; the last one is the run's ``run_finished``, and :attr:`RunStream.result` holds the result.

Closing the stream early (``aclose()``, leaving ``async with``, a ``break`` out of
``async for`` once the stream is dropped, or cancelling the task that reads it) cancels the run:
it ends with ``StopReason.CANCELLED``, and its ``run_finished`` reaches the listeners, so a
:class:`~ragloop.observability.traces.TraceRecorder` still stores its trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Generic, TypeVar

from ragloop.observability.events import LoopEvent

R = TypeVar("R")

_sink: ContextVar[_Sink | None] = ContextVar("ragloop_stream_sink", default=None)
_END = object()


class _Sink:
    """Where a streamed run's events go: a queue read on the event loop of the consumer. Runs
    nested in a streamed run put their events on every enclosing stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop, parent: _Sink | None) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.parent = parent
        self.thread = threading.get_ident()

    def put(self, item: object) -> None:
        if threading.get_ident() == self.thread:
            self.queue.put_nowait(item)
        else:  # a sync component ran a loop in a worker thread (run_sync)
            # a closed loop (RuntimeError) means nobody reads the stream any more
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        if self.parent is not None and item is not _END:
            self.parent.put(item)


def stream_event(event: LoopEvent) -> None:
    """Put ``event`` on the stream of the run in progress, if it is being streamed."""
    sink = _sink.get()
    if sink is not None:
        sink.put(event)


def streaming() -> bool:
    """Whether the run in progress is being streamed (components may then stream their text)."""
    return _sink.get() is not None


class _Progress(Generic[R]):
    """What a stream's generator shares with its :class:`RunStream`: the run's task and
    result. The generator holds this, never the stream, so a stream dropped after a ``break``
    is freed at once (no reference cycle waiting for the garbage collector) and its run
    cancelled then."""

    def __init__(self) -> None:
        self.task: asyncio.Task[R] | None = None
        self.result: R | None = None
        self.done = False


async def _events(
    start: Callable[[], Coroutine[Any, Any, R]],
    context: contextvars.Context,
    progress: _Progress[R],
) -> AsyncGenerator[LoopEvent, None]:
    loop = asyncio.get_running_loop()
    sink = _Sink(loop, context.get(_sink))
    context.run(_sink.set, sink)  # the run, and only the run, sees the sink
    task = loop.create_task(start(), context=context)
    progress.task = task
    task.add_done_callback(lambda _: sink.put(_END))
    try:
        while True:
            item = await sink.queue.get()
            if item is _END:
                break
            assert isinstance(item, LoopEvent)
            yield item
        while not sink.queue.empty():  # events put by other threads just before the end
            item = sink.queue.get_nowait()
            if isinstance(item, LoopEvent):
                yield item
        progress.result = await task
        progress.done = True
    finally:
        if not task.done():
            task.cancel()
            # wait for the run to end its trace; never raise the cancellation from here
            await asyncio.wait([task])


class RunStream(Generic[R]):
    """The events of one run as they happen: ``async for event in stream``. After the last
    event, :attr:`result` is the run's result; an exception the run raised is raised by the
    iteration instead. Use it as an async context manager (or call :meth:`aclose`) to cancel
    a run you stop reading early; a stream dropped unfinished (a ``break`` out of
    ``async for``) cancels its run as soon as it is freed."""

    def __init__(self, start: Callable[[], Coroutine[Any, Any, R]]) -> None:
        self._progress: _Progress[R] = _Progress()
        self._events = _events(start, contextvars.copy_context(), self._progress)

    @property
    def result(self) -> R:
        """The run's result, once every event has been read."""
        if not self._progress.done:
            raise RuntimeError("the run has not finished: read the stream to its end first")
        return self._progress.result  # type: ignore[return-value]

    def __del__(self) -> None:
        # dropped unfinished: cancel the run now rather than when asyncio gets round to
        # closing the generator (which then waits for the run to end its trace)
        task = self._progress.task
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # the event loop is closed already
                task.get_loop().call_soon_threadsafe(task.cancel)

    def __aiter__(self) -> RunStream[R]:
        return self

    async def __anext__(self) -> LoopEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        """Stop reading: a run still going is cancelled (its trace is still stored)."""
        await self._events.aclose()

    async def __aenter__(self) -> RunStream[R]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def stream_run(start: Callable[[], Coroutine[Any, Any, R]]) -> RunStream[R]:
    """The events of the run ``start()`` makes, as a :class:`RunStream` (nothing runs until it
    is read)."""
    return RunStream(start)
