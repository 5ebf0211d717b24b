"""The one driver the server and the CLI share: build, submit, filter, cancel.

start_chat (a ChatRequest) / start_completion build the prompt, resolve options into
SamplingParams, compile the output constraint a response_format or a forced tool_choice asks
for (here, on the caller's thread, before anything is queued), submit one EngineRequest and
return a ChatStream that pipes engine events through a StreamFilter. A stop-string match
cancels the engine request; the stream still ends with exactly one FinishEvent (reason STOP)
carrying the engine's usage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mlxd.chat.builder import (
    BuiltPrompt,
    build_chat_prompt,
    build_text_prompt,
    ends_in_reasoning,
)
from mlxd.chat.chat_request import ChatRequest, MaxTokensPolicy
from mlxd.chat.constraints import chat_constraint, forced_format, generic_call_hint
from mlxd.chat.filter import StreamFilter
from mlxd.chat.formats import Formats, detect_formats, explicit_markers
from mlxd.chat.images import load_images
from mlxd.chat.messages import image_refs, normalize_tools
from mlxd.chat.options import ChatOptions, response_schema, sampling_params
from mlxd.chat.tool_choice import with_system_hint
from mlxd.types import (
    ChatEvent,
    EngineEvent,
    FinishEvent,
    FinishReason,
    ModelKind,
    OutputConstraint,
    ReasoningMarkers,
    SamplingParams,
    TokenEvent,
    Usage,
    Warning,
)

if TYPE_CHECKING:  # the engine package is heavy: imported on use
    from mlxd.backend.structured.grammar import CompiledGrammar
    from mlxd.engine import Engine, ModelInfo, RequestHandle

__all__ = [
    "ChatStream",
    "chat_prompt",
    "start_chat",
    "start_completion",
    "stop_constraint_compiles",
]


class ChatStream:
    """Chat events of one request; iterate once, sync (`for`) or async (`async for`).

    Always ends with exactly one FinishEvent. Breaking out of the iteration, or cancel(), cancels
    the engine request.
    """

    def __init__(
        self,
        handle: RequestHandle,
        stream_filter: StreamFilter,
        prompt: BuiltPrompt,
        warnings: tuple[str, ...] = (),
    ) -> None:
        self.handle = handle
        self.filter = stream_filter
        self.prompt = prompt
        self.warnings = (*prompt.warnings, *warnings)
        self._done = False
        self._warned = False  # the prompt's and the request's warnings come first, once

    @property
    def request_id(self) -> str:
        return self.handle.request_id

    def cancel(self) -> None:
        """Idempotent: the stream then ends with FinishEvent(CANCELLED) (or already ended)."""
        self.handle.cancel()

    async def admitted(self, within: float) -> Usage:
        """The prompt's usage (prompt and cached tokens) once the engine has admitted the
        request, waiting at most `within` seconds (usually one engine step); no cached
        tokens if it is still queued then."""
        import asyncio

        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + within, 0.001
        while not self.handle.admitted and loop.time() < deadline:
            await asyncio.sleep(pause)
            pause = min(2 * pause, 0.05)
        cached = self.handle.cached_tokens if self.handle.admitted else 0
        return Usage(self.prompt.prompt_tokens, 0, cached)

    def __iter__(self) -> Iterator[ChatEvent]:
        if self._done:  # iterated already: the one FinishEvent was given
            return
        yield from self._prompt_warnings()
        try:
            for event in self.handle:
                events = self._on_engine_event(event)
                yield from events
                if self._done:
                    return
            if not self._done:
                yield from self._missing_finish()
        finally:
            if not self._done:
                self.handle.cancel()

    async def __aiter__(self) -> AsyncIterator[ChatEvent]:
        if self._done:
            return
        for warning in self._prompt_warnings():
            yield warning
        try:
            async for event in self.handle:
                for chat_event in self._on_engine_event(event):
                    yield chat_event
                if self._done:
                    return
            if not self._done:
                for chat_event in self._missing_finish():
                    yield chat_event
        finally:
            if not self._done:
                self.handle.cancel()

    def _prompt_warnings(self) -> list[ChatEvent]:
        if self._warned:
            return []
        self._warned = True
        return [Warning(message) for message in self.warnings]

    def _on_engine_event(self, event: EngineEvent) -> list[ChatEvent]:
        if isinstance(event, TokenEvent):
            events = self.filter.feed(event.token_ids, event.logprobs)
            if events:
                self.handle.shown()  # the engine may batch the next wake-ups
            if self.filter.stopped:
                # Tokens after the stop are ignored; the engine's FinishEvent brings usage.
                self.handle.cancel()
            return events
        assert isinstance(event, FinishEvent), f"unexpected engine event {event!r}"
        self._done = True
        return self.filter.finish(event)

    def _missing_finish(self) -> list[ChatEvent]:
        # The handle contract promises a FinishEvent; report a broken stream, never hang.
        self._done = True
        events = self.filter.finish(
            FinishEvent(FinishReason.ERROR, Usage(), error="engine stream ended without finish")
        )
        assert isinstance(events[-1], FinishEvent)
        return events


def start_chat(engine: Engine, info: ModelInfo, request: ChatRequest) -> ChatStream:
    """Build the chat prompt and start generating; raises InvalidRequest/TemplateError early.

    A forced tool choice (required, or a named tool) is asked for in the prompt and enforced
    by a grammar where the model's tool format allows. Images (image_url content parts) are
    read, checked and preprocessed here (chat.images).
    """
    info.require(ModelKind.GENERATION)
    messages, tools, forced, formats = _inputs(info, request)
    prompt = _prompt(info, request, messages, tools)
    reasoning = request.reasoning
    reasoning_open = prompt.reasoning_open
    if isinstance(reasoning, tuple | list):  # custom markers: is the prompt inside them?
        reasoning_open = ends_in_reasoning(prompt.text, explicit_markers(reasoning))
    elif reasoning is None:
        reasoning_open = False
    options = request.options
    stream_filter = StreamFilter(
        info.tokenizer,
        stop=options.stop,
        reasoning_open=reasoning_open,
        tools=tools or False,
        reasoning=reasoning,
        tool_format=formats.tool if forced else None,
    )
    end = formats.reasoning[1] if formats.reasoning else None
    constraint, warning = chat_constraint(
        formats,
        schema=response_schema(options),
        forced=forced,
        reasoning_open=reasoning_open,
        reasoning_closed=end is not None and prompt.text.rstrip().endswith(end),
    )
    warnings = (warning,) if warning else ()
    params = _params(info, options, request.max_tokens_policy)
    closed = end is not None and prompt.text.rstrip().endswith(end)  # thinking turned off
    # Only a budgeted request carries its markers: the others run exactly as before.
    budgeted = params.max_reasoning_tokens is not None and not closed
    markers = _reasoning_markers(info, formats, reasoning_open) if budgeted else None
    return _submit(engine, info, prompt, params, stream_filter, constraint, warnings, markers)


# GPT-OSS reasons in its analysis channel; closing it opens the final one (harmony format).
HARMONY_REASONING = (
    "<|channel|>analysis<|message|>",
    "<|end|><|start|>assistant<|channel|>final<|message|>",
)


def _reasoning_markers(
    info: ModelInfo, formats: Formats, reasoning_open: bool
) -> ReasoningMarkers | None:
    """The reasoning block in token ids, for the engine's budget: the detected markers, or
    for harmony the analysis channel, closed into the final one."""
    if formats.harmony:
        start, end = HARMONY_REASONING
    elif formats.reasoning is not None:
        start, end = formats.reasoning
    else:
        return None
    encode = info.tokenizer.encode
    ids = encode(end, add_special_tokens=False)
    if not ids:
        return None
    return ReasoningMarkers(
        tuple(encode(start, add_special_tokens=False)), tuple(ids), reasoning_open
    )


def chat_prompt(info: ModelInfo, request: ChatRequest) -> BuiltPrompt:
    """The prompt start_chat prefills for `request` (images read and expanded), without
    submitting it: what a token count counts."""
    messages, tools, _, _ = _inputs(info, request)
    return _prompt(info, request, messages, tools)


def _inputs(
    info: ModelInfo, request: ChatRequest
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, list[dict[str, Any]], Formats]:
    """(messages, the tools the template sees, the tools one of which must be called, the
    formats the answer is read in) under the request's tool choice. A forced call on a model
    with no tool-call format is asked for in GENERIC_JSON, in the system prompt."""
    tools = normalize_tools(request.tools)
    forced = request.tool_choice.forced(tools)
    messages, visible = request.tool_choice.apply(request.messages, tools)
    detected = detect_formats(info.tokenizer, reasoning=request.reasoning, tools=visible)
    formats = forced_format(detected, forced)
    if formats is not detected:
        messages = with_system_hint(messages, generic_call_hint(forced))
    return messages, visible, forced, formats


def _template_kwargs(request: ChatRequest) -> dict[str, Any] | None:
    """The request's template switches; a reasoning budget is also told to templates that
    read `thinking_budget` (Seed-OSS), unless the client set that switch itself."""
    budget = request.options.max_reasoning_tokens
    if budget is None:
        return request.template_kwargs
    return {"thinking_budget": budget, **(request.template_kwargs or {})}


def _prompt(
    info: ModelInfo,
    request: ChatRequest,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
) -> BuiltPrompt:
    refs = image_refs(messages)
    images = None
    if refs:
        images = load_images(refs, info.image_processor, allow_urls=request.allow_image_urls)
    return build_chat_prompt(
        info.tokenizer,
        messages,
        tools,
        _template_kwargs(request),
        request.template,
        images=images,
        window=info.context_window,
        continue_final=request.continue_final,
    )


def start_completion(
    engine: Engine,
    info: ModelInfo,
    prompt: str,
    options: ChatOptions,
    max_tokens_policy: MaxTokensPolicy = MaxTokensPolicy.WINDOW,
) -> ChatStream:
    """Raw text completion: no template, no reasoning split, no tool parsing (stops apply)."""
    info.require(ModelKind.GENERATION)
    built = build_text_prompt(info.tokenizer, prompt, window=info.context_window)
    stream_filter = StreamFilter(info.tokenizer, stop=options.stop, reasoning=None)
    plain = Formats(reasoning=None, harmony=False, tool=None)
    constraint, _ = chat_constraint(
        plain, schema=response_schema(options), forced=[], reasoning_open=False
    )
    params = _params(info, options, max_tokens_policy)
    return _submit(engine, info, built, params, stream_filter, constraint)


def _params(info: ModelInfo, options: ChatOptions, policy: MaxTokensPolicy) -> SamplingParams:
    """The request's options over the model's defaults, max_tokens set by `policy` if unset."""
    params = sampling_params(options, info.generation_defaults, vocab_size=info.vocab_size or None)
    if params.max_tokens is None:
        params = replace(params, max_tokens=policy.max_tokens(info.context_window))
    return params


def _submit(
    engine: Engine,
    info: ModelInfo,
    prompt: BuiltPrompt,
    params: SamplingParams,
    stream_filter: StreamFilter,
    constraint: OutputConstraint | None = None,
    warnings: tuple[str, ...] = (),
    reasoning: ReasoningMarkers | None = None,
) -> ChatStream:
    from mlxd.engine.request import EngineRequest  # the engine package is heavy: import on use

    request = EngineRequest(
        model=info.name,
        prompt_ids=prompt.token_ids,
        params=params,
        grammar=_compile(constraint, info) if constraint is not None else None,
        boundaries=prompt.boundaries,
        images=prompt.images,
        until_shown=True,
        reasoning=reasoning,
    )
    handle = engine.submit(request)
    return ChatStream(handle, stream_filter, prompt, warnings)


def _compile(constraint: OutputConstraint, info: ModelInfo) -> CompiledGrammar:
    """Compile on this (the caller's) thread, within the grammar budgets, before queueing."""
    from mlxd.backend.structured.grammar import (
        compile_constraint,  # llguidance: loaded on first use
    )

    vocab = info.vocab_size or len(info.tokenizer.get_vocab())
    return compile_constraint(constraint, info.tokenizer, vocab, info.eos_token_ids)


def stop_constraint_compiles() -> None:
    """Shutting down: end every grammar compile now (its request gets 503) and refuse new
    ones, so a drain never waits on a compile."""
    from mlxd.backend.structured.compile_pool import stop_shared_pool

    stop_shared_pool()
