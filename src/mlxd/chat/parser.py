"""The pure core of the stream filter: output text in, chat events out (no tokenizer, no I/O).

Two layers, each holding back only what could still become a match:
  StopMatcher   cuts the raw text at the first stop string (never emitted).
  OutputParser  splits the rest into text, reasoning and tool calls at markers: <think>-style
                reasoning, a ToolFormat's start/end markers, or GPT-OSS harmony channels.
Feeding the same text in any split gives the same events up to merging of adjacent deltas.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from enum import Enum, auto
from typing import Any

from mlxd.chat.formats import Formats, ToolFormat
from mlxd.chat.json_text import loads_json
from mlxd.types import ChatEvent, ReasoningDelta, TextDelta, ToolCall, Warning

__all__ = [
    "OutputParser",
    "StopMatcher",
    "holdback",
    "merge_events",
    "new_call_id",
    "parse_output",
    "split_at_marker",
]


class Mode(Enum):
    """What the parser is reading now."""

    CONTENT = auto()  # answer text
    REASONING = auto()  # inside <think>-style markers
    TOOL = auto()  # inside a tool call
    HARMONY_HEADER = auto()  # GPT-OSS: between <|start|>/<|channel|> and <|message|>
    HARMONY_BODY = auto()  # GPT-OSS: a message on the channel the header named


# Whitespace right before a marker is layout and is dropped, so trailing whitespace waits to see
# what follows; at most this many characters, and only where a marker can follow, so an answer
# that starts with (or is) a run of newlines still streams as it is generated.
WS_HOLD_CHARS = 2
_H_CLOSERS = ("<|end|>", "<|call|>", "<|return|>")
_H_OPENERS = ("<|start|>", "<|channel|>")
_H_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_H_RECIPIENT = re.compile(r"to=([^\s<]+)")


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def holdback(buf: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of `buf` that is a proper prefix of some marker."""
    longest = max((len(m) for m in markers), default=0)
    for k in range(min(len(buf), longest - 1), 0, -1):
        tail = buf[-k:]
        if any(m.startswith(tail) for m in markers):
            return k
    return 0


def split_at_marker(buf: str, markers: Sequence[str]) -> tuple[str, str | None, str]:
    """(text before the earliest marker, marker, rest), or (safe text, None, held-back tail)."""
    best: tuple[int, str] | None = None
    for m in markers:
        i = buf.find(m)
        if i >= 0 and (best is None or i < best[0] or (i == best[0] and len(m) > len(best[1]))):
            best = (i, m)
    if best is not None:
        i, m = best
        return buf[:i], m, buf[i + len(m) :]
    keep = holdback(buf, markers)
    return buf[: len(buf) - keep], None, buf[len(buf) - keep :]


class StopMatcher:
    """Cuts text at the first stop string; holds back only a possible stop-string prefix."""

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self.stop = tuple(s for s in stop if s)
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text
        self.end: int | None = None  # where the match ends, in characters of all text fed
        self._fed = 0
        self._buf = ""

    def feed(self, text: str) -> str:
        """Text safe to release now ("" once stopped)."""
        if self.stopped:
            return ""
        if not self.stop:
            return text
        self._buf += text
        self._fed += len(text)
        before, marker, rest = split_at_marker(self._buf, self.stop)
        if marker is not None:
            self.stopped = True
            self.matched = marker
            self.end = self._fed - len(self._buf) + len(before) + len(marker)
            self._buf = ""
        else:
            self._buf = rest
        return before

    def flush(self) -> str:
        out, self._buf = ("" if self.stopped else self._buf), ""
        return out


class OutputParser:
    """Splits model output into TextDelta, ReasoningDelta, ToolCall and Warning events."""

    def __init__(
        self,
        formats: Formats,
        *,
        stop: Sequence[str] = (),
        reasoning_open: bool = False,
        tools: bool = False,
        new_id: Callable[[], str] = new_call_id,
    ) -> None:
        self.formats = formats
        self.tool: ToolFormat | None = formats.tool if tools else None
        self.tools_enabled = tools
        self.stops = StopMatcher(stop)
        self.new_id = new_id
        self.tool_calls = 0
        self.markers_seen = 0  # structure consumed so far (lets callers attribute tokens)
        # Where reasoning text lies in all text fed ([start, end) characters, markers and
        # harmony headers excluded): what a reasoning token count counts.
        self.reasoning_spans: list[tuple[int, int]] = []
        self._pos = 0  # where _buf starts in all text fed
        self._buf = ""
        self._events: list[ChatEvent] = []
        self._tool_buf = ""
        self._tool_marker = ""
        self._lead_ws = ""  # Llama 3 JSON: whitespace held until the first real character
        self._ws_tail = ""  # trailing whitespace held back: dropped if a marker follows
        self._ws_kind: type[TextDelta] | type[ReasoningDelta] = TextDelta
        self._at_start = True
        if formats.harmony:
            self.mode = Mode.HARMONY_BODY
            self._header, self._channel, self._recipient = "", "final", ""
        else:
            open_ = reasoning_open and formats.reasoning is not None
            self.mode = Mode.REASONING if open_ else Mode.CONTENT
        self._strip = self.mode is Mode.REASONING  # drop whitespace right after a marker

    @property
    def stopped(self) -> bool:
        return self.stops.stopped

    @property
    def in_text(self) -> bool:
        """The next output would be answer text (not reasoning, a tool call or structure)."""
        if self.mode is Mode.HARMONY_BODY:
            return self._channel != "analysis" and not self._is_harmony_tool()
        return self.mode is Mode.CONTENT

    def feed(self, text: str) -> list[ChatEvent]:
        self._scan(self.stops.feed(text))
        return self._take()

    def flush(self) -> list[ChatEvent]:
        """End of output: release held-back text and close any open tool call."""
        self._scan(self.stops.flush())
        rest, self._buf = self._buf, ""
        if rest:
            self._emit(rest)
        self._close_open_block()
        return self._take()

    # ---- scanning ------------------------------------------------------------------------

    def _scan(self, text: str) -> None:
        self._buf += text
        while self._buf:
            before, marker, rest = split_at_marker(self._buf, self._markers())
            if before:
                self._emit(before)
            self._pos += len(self._buf) - len(rest)
            self._buf = rest
            if marker is None:
                return
            self._on_marker(marker)

    def _markers(self) -> tuple[str, ...]:
        if self.mode is Mode.HARMONY_BODY:
            return _H_CLOSERS + _H_OPENERS
        if self.mode is Mode.HARMONY_HEADER:
            return ("<|message|>",)
        if self.mode is Mode.REASONING:
            assert self.formats.reasoning is not None
            return (self.formats.reasoning[1],)
        if self.mode is Mode.TOOL:
            assert self.tool is not None
            return (self.tool.end,) if self.tool.end else ()
        markers = list(self.formats.layout)
        if self.formats.reasoning is not None:
            markers.append(self.formats.reasoning[0])
        if self.tool is not None and self.tool.start:
            markers.append(self.tool.start)
        return tuple(markers)

    def _on_marker(self, marker: str) -> None:
        self.markers_seen += 1
        self._ws_tail = ""  # whitespace right before a marker is layout, not content
        if self.mode in (Mode.HARMONY_BODY, Mode.HARMONY_HEADER):
            self._on_harmony_marker(marker)
        elif self.mode is Mode.CONTENT and self.tool is not None and marker == self.tool.start:
            self.mode, self._tool_buf, self._at_start = Mode.TOOL, "", False
            self._tool_marker = marker
        elif self.mode is Mode.CONTENT and marker in self.formats.layout:
            self._strip = True  # layout around the answer: dropped
        elif self.mode is Mode.CONTENT:
            self.mode, self._strip = Mode.REASONING, True
        elif self.mode is Mode.REASONING:
            self.mode, self._strip = Mode.CONTENT, True
        else:  # Mode.TOOL end marker
            self._finish_tool(terminated=True)

    def _emit(self, text: str) -> None:
        if self.mode is Mode.HARMONY_HEADER:
            self._header += text
            return
        if self.mode is Mode.TOOL or (self.mode is Mode.HARMONY_BODY and self._is_harmony_tool()):
            self._tool_buf += text
            return
        if self._in_reasoning():
            self._note_reasoning(len(text))
        if self._strip:
            text = text.lstrip()
            if not text:
                return
            self._strip = False
        if self._in_reasoning():
            self._deliver(ReasoningDelta, text)
        elif self.tool is not None and self.tool.json_at_start and self._at_start:
            self._content_at_start(text)
        else:
            self._text(text)

    def _in_reasoning(self) -> bool:
        return self.mode is Mode.REASONING or (
            self.mode is Mode.HARMONY_BODY and self._channel == "analysis"
        )

    def _note_reasoning(self, length: int) -> None:
        """The text being emitted (it starts at _pos) is reasoning."""
        spans, start = self.reasoning_spans, self._pos
        if spans and spans[-1][1] == start:
            spans[-1] = (spans[-1][0], start + length)
        else:
            spans.append((start, start + length))

    def _content_at_start(self, text: str) -> None:
        stripped = text.lstrip()
        if not stripped:
            self._lead_ws += text
            excess = len(self._lead_ws) - WS_HOLD_CHARS
            if excess > 0:  # too long to be layout before a JSON call: it is content
                self._events.append(TextDelta(self._lead_ws[:excess]))
                self._lead_ws = self._lead_ws[excess:]
            return
        self._at_start = False
        if stripped.startswith("{"):
            self.mode, self._tool_buf, self._lead_ws = Mode.TOOL, stripped, ""
            self._tool_marker = ""  # a bare JSON call has no start marker to give back
            return
        self._text(self._lead_ws + text)
        self._lead_ws = ""

    def _text(self, text: str) -> None:
        self._deliver(TextDelta, text)

    def _deliver(self, kind: type[TextDelta] | type[ReasoningDelta], text: str) -> None:
        """Emit `text`, holding up to WS_HOLD_CHARS of trailing whitespace while a marker
        could still follow it (then it is layout, dropped)."""
        full = self._ws_tail + text
        held = len(full) - len(full.rstrip()) if self._markers() else 0
        held = min(held, WS_HOLD_CHARS)
        body, self._ws_tail, self._ws_kind = (
            full[: len(full) - held],
            full[len(full) - held :],
            kind,
        )
        if body:
            self._events.append(kind(body))

    def _take(self) -> list[ChatEvent]:
        events, self._events = merge_events(self._events), []
        return events

    # ---- tool calls ---------------------------------------------------------------------

    def _close_open_block(self) -> None:
        if self.mode is Mode.TOOL:
            self._finish_tool(terminated=self.tool is not None and self.tool.end is None)
        elif self.mode is Mode.HARMONY_BODY and self._is_harmony_tool():
            self._finish_harmony_tool()
        if self._lead_ws and not self._strip:
            self._text(self._lead_ws)
        self._lead_ws = ""
        if self._ws_tail:  # the output ended with whitespace: it was content after all
            self._events.append(self._ws_kind(self._ws_tail))
            self._ws_tail = ""

    def _finish_tool(self, *, terminated: bool) -> None:
        assert self.tool is not None
        body, self._tool_buf = self._tool_buf, ""
        self.mode, self._strip = Mode.CONTENT, True
        try:
            calls = self.tool.parse(body)
        except ValueError as e:
            raw = self._tool_marker + body
            if terminated and self.tool.end:
                raw += self.tool.end
            self._events.append(Warning(f"could not parse a {self.tool.name} tool call: {e}"))
            self._events.append(TextDelta(raw))
            return
        for call in calls:
            self._add_call(call["name"], call["arguments"], call.get("id"))

    def _add_call(
        self, name: str, arguments: str | dict[str, Any], call_id: str | None = None
    ) -> None:
        args = (
            arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        )
        self._events.append(ToolCall(call_id or self.new_id(), name, args, self.tool_calls))
        self.tool_calls += 1

    # ---- harmony ------------------------------------------------------------------------

    def _is_harmony_tool(self) -> bool:
        return self.tools_enabled and self._recipient.startswith("functions.")

    def _on_harmony_marker(self, marker: str) -> None:
        if self.mode is Mode.HARMONY_HEADER:  # "<|message|>": the header is complete
            channel = _H_CHANNEL.search(self._header)
            recipient = _H_RECIPIENT.search(self._header)
            self._channel = channel.group(1) if channel else "final"
            self._recipient = recipient.group(1) if recipient else ""
            self.mode, self._header, self._tool_buf = Mode.HARMONY_BODY, "", ""
            self._strip = False
            return
        if self._is_harmony_tool():
            self._finish_harmony_tool()
        self.mode, self._header = Mode.HARMONY_HEADER, (marker if marker in _H_OPENERS else "")
        self._channel, self._recipient = "final", ""

    def _finish_harmony_tool(self) -> None:
        name = self._recipient.removeprefix("functions.")
        body, self._tool_buf = self._tool_buf, ""
        try:
            args = loads_json(body) if body.strip() else {}
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as e:
            self._events.append(Warning(f"could not parse a harmony tool call to {name}: {e}"))
            self._events.append(TextDelta(body))
            return
        self._add_call(name, args)


def merge_events(events: list[ChatEvent]) -> list[ChatEvent]:
    """Join adjacent deltas of the same kind (fewer, larger events; same content)."""
    out: list[ChatEvent] = []
    for ev in events:
        last = out[-1] if out else None
        if isinstance(ev, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta(last.text + ev.text, last.logprobs + ev.logprobs)
        elif isinstance(ev, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(last.text + ev.text)
        else:
            out.append(ev)
    return out


def parse_output(text: str, formats: Formats, **kwargs: Any) -> list[ChatEvent]:
    """One-shot parse of a whole output (the reference the streaming tests compare against)."""
    parser = OutputParser(formats, **kwargs)
    return merge_events(parser.feed(text) + parser.flush())
