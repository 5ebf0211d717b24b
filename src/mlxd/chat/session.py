"""The one driver the server and the CLI share: build, submit, filter, cancel.

start_chat / start_completion build the prompt, map options through OPTIONS to
SamplingParams, compile the output constraint a response_format or a forced tool_choice asks
for (here, on the caller's thread, before anything is queued), submit one EngineRequest and
return a ChatStream that pipes engine events through a StreamFilter. A stop-string match
cancels the engine request; the stream still ends with exactly one FinishEvent (reason STOP)
carrying the engine's usage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from mlxd.chat.builder import (
    BuiltPrompt,
    build_chat_prompt,
    build_text_prompt,
    ends_in_reasoning,
)
from mlxd.chat.constraints import chat_constraint, forced_tool
from mlxd.chat.filter import StreamFilter
from mlxd.chat.formats import Formats, detect_formats, explicit_markers
from mlxd.chat.images import load_images
from mlxd.chat.messages import image_refs, normalize_tools
from mlxd.chat.options import response_schema, sampling_params, stop_strings
from mlxd.config import SERVER_DEFAULT_MAX_TOKENS_FRACTION
from mlxd.types import (
    ChatEvent,
    EngineEvent,
    FinishEvent,
    FinishReason,
    OutputConstraint,
    TokenEvent,
    Usage,
    Warning,
)

if TYPE_CHECKING:  # the engine package is heavy: imported on use
    from mlxd.backend.structured.grammar import CompiledGrammar
    from mlxd.engine import Engine, ModelInfo, RequestHandle

__all__ = ["ChatStream", "chat_prompt", "start_chat", "start_completion"]


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
                self.handle.settle()  # output shown: the engine may batch the next wake-ups
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


def start_chat(
    engine: Engine,
    info: ModelInfo,
    messages: list[dict[str, Any]],
    *,
    options: Mapping[str, object],
    tools: list[dict[str, Any]] | None = None,
    tool_choice: object = None,
    template_kwargs: dict[str, Any] | None = None,
    server_defaults: bool = False,
    reasoning: object = "auto",
    template: str | None = None,
    allow_image_urls: bool = False,
) -> ChatStream:
    """Build the chat prompt and start generating; raises InvalidRequest/TemplateError early.

    tool_choice: None, "none", "auto", "required" or {"type": "function", "function": {"name":
    ...}}; the last two force a call, enforced by a grammar where the model's tool format
    allows. reasoning: "auto" (markers detected from the tokenizer), None (no reasoning split)
    or a custom (start, end) marker pair. template: a chat template instead of the model's.
    Images (image_url content parts) are read, checked and preprocessed here (chat.images);
    allow_image_urls lets them be http(s) URLs the server fetches.
    """
    tool_list = normalize_tools(tools)
    prompt = chat_prompt(info, messages, tool_list, template_kwargs, template, allow_image_urls)
    reasoning_open = prompt.reasoning_open
    if isinstance(reasoning, tuple | list):  # custom markers: is the prompt inside them?
        reasoning_open = ends_in_reasoning(prompt.text, explicit_markers(reasoning))
    elif reasoning is None:
        reasoning_open = False
    stream_filter = StreamFilter(
        info.tokenizer,
        stop=stop_strings(options),
        reasoning_open=reasoning_open,
        tools=tool_list or False,
        reasoning=reasoning,
    )
    formats = detect_formats(info.tokenizer, reasoning=reasoning, tools=tool_list)
    end = formats.reasoning[1] if formats.reasoning else None
    constraint, warning = chat_constraint(
        formats,
        schema=response_schema(options),
        forced=forced_tool(tool_choice, tool_list),
        reasoning_open=reasoning_open,
        reasoning_closed=end is not None and prompt.text.rstrip().endswith(end),
    )
    warnings = (warning,) if warning else ()
    return _submit(
        engine, info, prompt, options, stream_filter, server_defaults, constraint, warnings
    )


def chat_prompt(
    info: ModelInfo,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    template: str | None = None,
    allow_image_urls: bool = False,
) -> BuiltPrompt:
    """The prompt start_chat prefills for these inputs (images read and expanded), without
    submitting it: what a token count counts."""
    refs = image_refs(messages)
    images = load_images(refs, info.image_processor, allow_urls=allow_image_urls) if refs else None
    return build_chat_prompt(
        info.tokenizer, messages, tools, template_kwargs, template, images=images
    )


def start_completion(
    engine: Engine,
    info: ModelInfo,
    prompt: str,
    *,
    options: Mapping[str, object],
    server_defaults: bool = False,
) -> ChatStream:
    """Raw text completion: no template, no reasoning split, no tool parsing (stops apply)."""
    built = build_text_prompt(info.tokenizer, prompt)
    stream_filter = StreamFilter(info.tokenizer, stop=stop_strings(options), reasoning=None)
    plain = Formats(reasoning=None, harmony=False, tool=None)
    constraint, _ = chat_constraint(
        plain, schema=response_schema(options), forced=[], reasoning_open=False
    )
    return _submit(engine, info, built, options, stream_filter, server_defaults, constraint)


def _submit(
    engine: Engine,
    info: ModelInfo,
    prompt: BuiltPrompt,
    options: Mapping[str, object],
    stream_filter: StreamFilter,
    server_defaults: bool,
    constraint: OutputConstraint | None = None,
    warnings: tuple[str, ...] = (),
) -> ChatStream:
    from mlxd.engine.request import EngineRequest  # the engine package is heavy: import on use

    vocab = info.vocab_size or None
    params = sampling_params(options, info.generation_defaults, vocab_size=vocab)
    cap = None
    if server_defaults and params.max_tokens is None:
        cap = max(1, int(info.context_window * SERVER_DEFAULT_MAX_TOKENS_FRACTION))
    request = EngineRequest(
        model=info.name,
        prompt_ids=prompt.token_ids,
        params=params,
        max_tokens_cap=cap,
        grammar=_compile(constraint, info) if constraint is not None else None,
        boundaries=prompt.boundaries,
        images=prompt.images,
        until_shown=True,
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
