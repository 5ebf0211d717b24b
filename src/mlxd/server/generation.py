"""Drive one ChatStream for HTTP: as SSE frames or as one body, with cancel on disconnect.

Every API (chat and text completions, Anthropic messages, Responses) goes through `respond`;
only its Wire (the frames and the body it makes of chat events) differs. Cancellation is a
message plus a `finally`: whatever ends the response early (client gone, shutdown, an
exception) calls stream.cancel() once, and the engine frees the request at its next step
boundary.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive

from mlxd.errors import EngineUnavailable, InvalidRequest, MlxdError, from_code
from mlxd.server.lifecycle import Generation, Lifecycle
from mlxd.server.metrics import Metrics
from mlxd.server.request_inputs import ApiChatRequest, chat_request, in_client_terms
from mlxd.server.settings import ServerSettings
from mlxd.server.sse import SSE_HEADERS, paced
from mlxd.server.state import ServerState, server_state
from mlxd.types import ChatEvent, FinishEvent, FinishReason, Usage, Warning

if TYPE_CHECKING:
    from mlxd.chat.chat_request import ChatRequest
    from mlxd.chat.embedding import Embeddings, EmbedInput
    from mlxd.chat.session import ChatStream
    from mlxd.engine import ModelInfo

log = logging.getLogger("mlxd.server")
# A stream's opening waits at most this long for the engine to admit its request (one engine
# step, usually), so Anthropic's message_start can carry the prompt's cache split.
ADMISSION_WAIT_S = 0.5
R = TypeVar("R", bound=ApiChatRequest)


class Stream(Protocol):
    def cancel(self) -> None: ...
    def __aiter__(self) -> AsyncIterator[ChatEvent]: ...
    async def admitted(self, within: float) -> Usage: ...


class Wire(Protocol):
    """One request's wire format: SSE frames while streaming, or one body at the end."""

    def opening(self, known: Usage | None = None) -> list[bytes]:
        """Frames sent before the first event; `known`: the prompt's usage known by then
        (prompt tokens, and the cached ones if the engine has admitted the request)."""
        ...

    def keep_alive(self) -> bytes:
        """What the stream sends when it has had nothing to send for a while."""
        ...

    def frames(self, ev: ChatEvent) -> list[bytes]:
        """Frames for one event (the FinishEvent included)."""
        ...

    def closing(self) -> list[bytes]:
        """Frames after the FinishEvent's."""
        ...

    def error_frames(self, err: MlxdError) -> list[bytes]:
        """The last frames of a stream that failed after it started."""
        ...

    def add(self, ev: ChatEvent) -> None:
        """Non-streaming: take one event (not the FinishEvent) into the body."""
        ...

    def response(self, finish: FinishEvent) -> dict[str, Any]:
        """Non-streaming: the whole body."""
        ...


class RequestMeter:
    """One request's TTFT and inter-token latency, into the shared histograms, and its finish
    reason as its client saw it, counted once at its end (`cancelled`: the client left)."""

    __slots__ = ("metrics", "start", "last", "reason")

    def __init__(self, metrics: Metrics, start: float) -> None:
        self.metrics = metrics
        self.start = start
        self.last: float | None = None
        self.reason: FinishReason | None = None

    def tick(self, ev: ChatEvent) -> None:
        if isinstance(ev, FinishEvent):
            self.reason = ev.reason
            return
        if isinstance(ev, Warning):
            log.warning("%s", ev.message)
            return
        now = time.perf_counter()
        if self.last is None:
            self.metrics.ttft.observe(now - self.start)
        else:
            self.metrics.itl.observe(now - self.last)
        self.last = now

    def end(self, gen: Generation, failed: bool = False) -> None:
        """The request is over (`failed`: it ended in an error the client got)."""
        reason = FinishReason.ERROR if failed or gen.aborted else self.reason
        self.metrics.finished[(reason or FinishReason.CANCELLED).value] += 1


def failure(finish: FinishEvent, gen: Generation) -> MlxdError | None:
    """The error a FinishEvent stands for, if any (shutdown aborts count as 503)."""
    if gen.aborted:
        return EngineUnavailable("server is shutting down; generation stopped")
    if finish.reason == FinishReason.ERROR:
        return from_code(finish.error_code, finish.error)
    return None


async def start_chat_stream(st: ServerState, info: ModelInfo, request: ChatRequest) -> ChatStream:
    """chat.session.start_chat for a request of any API, off the event loop (it renders and
    tokenizes the prompt)."""
    from mlxd.chat.session import start_chat

    return await asyncio.to_thread(start_chat, st.engine, info, request)


async def embed(
    st: ServerState, model: str | None, request: EmbedInput
) -> tuple[ModelInfo, Embeddings]:
    """Every embeddings route's body: look the model up, tokenize and submit off the event
    loop, wait; a wait that ends early (the client left) cancels the request."""
    from mlxd.chat.embedding import start_embedding

    info = await st.models.get(model)
    pending = await asyncio.to_thread(start_embedding, st.engine, info, request)
    try:
        return info, await pending.wait()
    finally:
        pending.cancel()  # nothing to do once answered


async def chat_endpoint(
    request: Request,
    read: Callable[[bytes, ServerSettings], R],
    wire: Callable[[R, ModelInfo, ChatStream, ServerState], Wire],
    template: Callable[[R, ServerSettings], str | None] | None = None,
    media_type: str = "text/event-stream",
) -> Response:
    """One chat request of any API: `read` parses the body (refusals before any model
    load), then the same prompt, start_chat and response driver; `wire` is the API's (and
    `media_type` its stream's)."""
    st = server_state(request)
    start = time.perf_counter()
    req = read(await request.body(), st.settings)
    chat_template = template(req, st.settings) if template is not None else None
    info = await st.models.get(req.model)
    try:
        chat = chat_request(req, st.settings, req.options(), chat_template)
        stream = await start_chat_stream(st, info, chat)
    except InvalidRequest as err:
        raise in_client_terms(err, req.OPTION_FIELDS) from None
    wired = wire(req, info, stream, st)
    return await respond(request, st, stream, wired, req.stream, start, media_type)


async def respond(
    request: Request,
    st: ServerState,
    stream: Stream,
    wire: Wire,
    streaming: bool,
    start: float,
    media_type: str = "text/event-stream",
) -> Response:
    """The HTTP response for a started ChatStream: a stream of the wire's frames (SSE, or
    `media_type`'s) or one JSON body."""
    try:
        gen = st.lifecycle.begin(stream)
    except Exception:
        stream.cancel()
        raise
    meter = RequestMeter(st.metrics, start)
    if not streaming:
        body = await collect(stream, wire, gen, st.lifecycle, meter, request.receive)
        return JSONResponse(body)

    async def cleanup() -> None:
        # Safety net: runs even when the client left before the body iterator started. On the
        # loop (a sync task would hop to a worker thread per request): Lifecycle.end may set
        # the drain's asyncio.Event, which only the loop's thread may touch.
        stream.cancel()
        st.lifecycle.end(gen)

    return StreamingResponse(
        sse_body(stream, wire, gen, st.lifecycle, meter, st.settings.stream_keepalive),
        media_type=media_type,
        headers=SSE_HEADERS,
        background=BackgroundTask(cleanup),
    )


async def sse_body(
    stream: Stream,
    wire: Wire,
    gen: Generation,
    lifecycle: Lifecycle,
    meter: RequestMeter,
    idle_s: float = 0.0,
) -> AsyncIterator[bytes]:
    """The SSE byte stream; an error after the first byte becomes the wire's error frames.
    The opening waits (briefly) for the engine to admit the request, so it can tell the
    prompt's cache split; a keep-alive goes out whenever nothing else did for `idle_s`."""
    failed = False
    try:
        known = await stream.admitted(ADMISSION_WAIT_S)
        for frame in wire.opening(known):
            yield frame
        async for ev in paced(aiter(stream), idle_s):
            if ev is None:
                yield wire.keep_alive()
                continue
            meter.tick(ev)
            if isinstance(ev, FinishEvent):
                err = failure(ev, gen)
                if err is not None:
                    failed = True
                    for frame in wire.error_frames(err):
                        yield frame
                    return
            for frame in wire.frames(ev):
                yield frame
        for frame in wire.closing():
            yield frame
    except MlxdError as err:
        failed = True
        for frame in wire.error_frames(err):
            yield frame
    finally:
        # Client gone (the generator was cancelled/closed) or done: either way, free the slot.
        meter.end(gen, failed)
        stream.cancel()
        lifecycle.end(gen)


async def collect(
    stream: Stream,
    wire: Wire,
    gen: Generation,
    lifecycle: Lifecycle,
    meter: RequestMeter,
    receive: Receive,
) -> dict[str, Any]:
    """Run a stream to its end for a non-streaming response; a disconnect cancels it."""
    watcher = asyncio.create_task(_cancel_on_disconnect(receive, stream))
    finish = FinishEvent(FinishReason.CANCELLED, Usage())
    try:
        async for ev in stream:
            meter.tick(ev)
            if isinstance(ev, FinishEvent):
                finish = ev
            else:
                wire.add(ev)
    finally:
        meter.end(gen, finish.reason is FinishReason.ERROR)
        watcher.cancel()
        stream.cancel()
        lifecycle.end(gen)
    err = failure(finish, gen)
    if err is not None:
        raise err
    return wire.response(finish)


async def _cancel_on_disconnect(receive: Receive, stream: Stream) -> None:
    """Wait for http.disconnect (the body is already read) and cancel the generation."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            stream.cancel()
            return
