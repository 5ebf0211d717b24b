"""StreamFilter: engine token ids in, chat events out, for one request.

Detokenizes with mlx-lm's streaming detokenizer (tokenizer.detokenizer: UTF-8 safe across token
boundaries) and hands the text to the pure OutputParser (stop strings, reasoning, tool calls).
No I/O and no mlx: the caller drives it and cancels the engine request when `stopped`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mlxd.chat.formats import ToolFormat, detect_formats
from mlxd.chat.parser import OutputParser, merge_events
from mlxd.types import (
    ChatEvent,
    FinishEvent,
    FinishReason,
    TextDelta,
    Tokenizer,
    TokenLogprob,
)

__all__ = ["StreamFilter", "TokenEnds"]


class TokenEnds:
    """Where each token's text ends in all text fed (characters): text positions to tokens."""

    __slots__ = ("_chars", "_ends")

    def __init__(self) -> None:
        self._ends: list[int] = []
        self._chars = 0

    def __len__(self) -> int:
        return len(self._ends)

    def add(self, length: int) -> None:
        self._chars += length
        self._ends.append(self._chars)

    def tokens_to(self, end: int | None) -> int:
        """How many tokens it took for the text to reach `end` characters."""
        if end is None:
            return len(self._ends)
        return min(bisect_left(self._ends, end) + 1, len(self._ends))

    def tokens_within(self, spans: Sequence[tuple[int, int]]) -> int:
        """How many tokens' text lies inside the [start, end) spans (a token whose text is
        empty counts where it stands, before any text at the span's end)."""
        ends = self._ends
        starts = [0, *ends[:-1]]
        total = 0
        for a, b in spans:
            first, after = (
                bisect_left(starts, a),
                min(bisect_right(ends, b), bisect_left(starts, b)),
            )
            total += max(0, after - first)
        return total


class StreamFilter:
    """Per-request cursor over shared, immutable format detection.

    tools: truthy enables tool-call parsing (a list of tool schemas is passed to mlx-lm
    parsers that need it). reasoning: "auto" (detect from vocab/template), None (no split)
    or a (start, end) marker pair. tool_format: the format calls are read in, instead of the
    detected one (a forced call on a model without one: formats.GENERIC_JSON).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        stop: Sequence[str] = (),
        reasoning_open: bool = False,
        tools: bool | list[dict[str, Any]] = False,
        reasoning: object = "auto",
        tool_format: ToolFormat | None = None,
    ) -> None:
        schemas = tools if isinstance(tools, list) else None
        formats = detect_formats(tokenizer, reasoning=reasoning, tools=schemas)
        if tool_format is not None:
            formats = replace(formats, tool=tool_format)
        self.parser = OutputParser(
            formats, stop=stop, reasoning_open=reasoning_open, tools=bool(tools)
        )
        self._detok = tokenizer.detokenizer
        # EOS ids end the answer; their text ("<|im_end|>") is not part of it.
        self._skip = frozenset(getattr(tokenizer, "eos_token_ids", ()) or ())
        self._logprobs: list[TokenLogprob] = []
        self._finished = False
        self._ends = TokenEnds()
        self.stop_tokens: int | None = None  # tokens up to the one that completed the stop

    @property
    def stopped(self) -> bool:
        """A stop string matched: later tokens are ignored; cancel the engine request."""
        return self.parser.stopped

    def feed(
        self, token_ids: Sequence[int], logprobs: Sequence[TokenLogprob] = ()
    ) -> list[ChatEvent]:
        if self.stopped or self._finished:
            return []
        if not logprobs:
            # No logprobs to pair with text: the parser takes the tokens' text in one piece
            # (it gives the same events for any split; half the filter's cost per token).
            events = self.parser.feed("".join([self._add(token) for token in token_ids]))
            if self.stopped:
                self.stop_tokens = self._ends.tokens_to(self.parser.stops.end)
            return events
        events = []
        # One token at a time, so each token's logprob goes with the text it produced.
        for i, token in enumerate(token_ids):
            if self.stopped:
                break
            text = self._add(token)
            if token in self._skip:
                continue
            if i < len(logprobs):
                self._logprobs.append(logprobs[i])
            events += self._feed_text(text)
            if self.stopped:
                self.stop_tokens = len(self._ends)
        return merge_events(events)

    def _add(self, token: int) -> str:
        """One token into the detokenizer; its text (none for EOS), its end noted."""
        text = ""
        if token not in self._skip:
            self._detok.add_token(int(token))
            text = self._detok.last_segment
        self._ends.add(len(text))
        return text

    def _feed_text(self, text: str) -> list[ChatEvent]:
        markers = self.parser.markers_seen
        events = self.parser.feed(text)
        if not any(isinstance(e, TextDelta) for e in events) and (
            not self.parser.in_text or self.parser.markers_seen != markers
        ):
            self._logprobs = []  # reasoning, a tool call or a marker: not answer text
        return self._attach(events)

    def finish(self, event: FinishEvent) -> list[ChatEvent]:
        """Flush held-back text, close open blocks, and end with exactly one FinishEvent: the
        engine's, its reason as the chat layer sees it (a matched stop string, tool calls)."""
        if self._finished:
            return []
        self._finished = True
        events: list[ChatEvent] = []
        if not self.stopped:
            self._detok.finalize()
            events += self.parser.feed(self._detok.last_segment)
        events += self.parser.flush()
        events = self._attach(events)
        stop_string = self.parser.stops.matched
        usage = event.usage
        if self.stop_tokens is not None and self.stop_tokens < usage.completion_tokens:
            usage = replace(usage, completion_tokens=self.stop_tokens)  # none past the stop
        if self.parser.reasoning_spans:
            reasoning = self._ends.tokens_within(self.parser.reasoning_spans)
            usage = replace(usage, reasoning_tokens=min(reasoning, usage.completion_tokens))
        reason = self._reason(event.reason)
        events.append(replace(event, reason=reason, usage=usage, stop_string=stop_string))
        return events

    def _reason(self, engine_reason: FinishReason) -> FinishReason:
        if self.stopped:
            return FinishReason.STOP  # the caller cancelled the engine because a stop matched
        if engine_reason == FinishReason.STOP and self.parser.tool_calls:
            return FinishReason.TOOL_CALLS
        return engine_reason

    def _attach(self, events: list[ChatEvent]) -> list[ChatEvent]:
        """Give pending token logprobs to the first text delta (the text they produced)."""
        if not self._logprobs:
            return events
        for i, ev in enumerate(events):
            if isinstance(ev, TextDelta):
                events[i] = TextDelta(ev.text, ev.logprobs + tuple(self._logprobs))
                self._logprobs = []
                break
        return events
