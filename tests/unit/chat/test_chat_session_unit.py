"""ChatStream and the submit rules against a small fake engine (the real engine is exercised in
tests/integration/chat/test_chat_session.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlxd.chat.chat_request import MaxTokensPolicy
from mlxd.chat.options import ChatOptions
from mlxd.chat.session import start_chat, start_completion
from mlxd.types import FinishEvent, FinishReason, TextDelta, TokenEvent, Usage
from tests.chat_requests import chat_request


class FakeTokenizer:
    """Characters are tokens (id = code point); enough for the builder and the filter."""

    chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}A:"
    bos_token = None
    eos_token_ids = {0}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def get_vocab(self) -> dict[str, int]:
        return {}

    @property
    def detokenizer(self) -> Any:
        return FakeDetokenizer()


class FakeDetokenizer:
    def __init__(self) -> None:
        self.text, self.offset = "", 0

    def add_token(self, token: int) -> None:
        self.text += chr(token)

    def finalize(self) -> None:
        pass

    @property
    def last_segment(self) -> str:
        seg, self.offset = self.text[self.offset :], len(self.text)
        return seg


@dataclass
class FakeHandle:
    events: list[Any]
    request_id: str = "req-1"
    cancels: int = 0
    shown_after: int | None = None  # how many events had been taken when shown() came
    taken: int = 0

    def cancel(self) -> None:
        self.cancels += 1

    def shown(self) -> None:
        if self.shown_after is None:
            self.shown_after = self.taken

    def __iter__(self):
        for event in self.events:
            self.taken += 1
            yield event


@dataclass
class FakeEngine:
    events: list[Any]
    requests: list[Any] = field(default_factory=list)
    handles: list[FakeHandle] = field(default_factory=list)

    def submit(self, request: Any) -> FakeHandle:
        self.requests.append(request)
        self.handles.append(FakeHandle(list(self.events)))
        return self.handles[-1]


@dataclass
class FakeInfo:
    name: str = "fake"
    tokenizer: Any = field(default_factory=FakeTokenizer)
    context_window: int = 1000
    generation_defaults: dict[str, Any] = field(default_factory=lambda: {"temperature": 0.5})
    vocab_size: int = 0

    def require(self, kind: object) -> None:
        """A generative model: the session's kind check passes."""


def _tokens(text: str) -> TokenEvent:
    return TokenEvent(tuple(ord(c) for c in text))


DONE = FinishEvent(FinishReason.STOP, Usage(5, 3))
USER = [{"role": "user", "content": "hi"}]


def test_chat_session_server_policy_caps_max_tokens_at_half_the_window():
    engine = FakeEngine([_tokens("ok"), DONE])
    half = MaxTokensPolicy.HALF_WINDOW
    for request in [
        chat_request(USER, max_tokens_policy=half),
        chat_request(USER),
        chat_request(USER, {"max_tokens": 7}, max_tokens_policy=half),
    ]:
        list(start_chat(engine, FakeInfo(), request))
    assert [r.params.max_tokens for r in engine.requests] == [500, None, 7]
    assert half.max_tokens(1 << 30) == 1 << 20  # within the bound a client may ask for


def test_chat_session_stop_cancels_the_engine_and_drains_to_finish():
    engine = FakeEngine([_tokens("abc"), _tokens("dXY"), _tokens("more"), DONE])
    stream = start_completion(engine, FakeInfo(), "p", ChatOptions.parse({"stop": ["XY"]}))
    events = list(stream)
    finish = FinishEvent(FinishReason.STOP, Usage(5, 3), stop_string="XY")
    assert events == [TextDelta("abc"), TextDelta("d"), finish]
    assert engine.handles[0].cancels >= 1


def test_chat_session_missing_finish_is_an_error_finish():
    engine = FakeEngine([_tokens("abc")])
    events = list(start_completion(engine, FakeInfo(), "p", ChatOptions.parse({})))
    assert events[0] == TextDelta("abc")
    assert isinstance(events[-1], FinishEvent) and events[-1].reason == FinishReason.ERROR


def test_chat_session_breaking_out_cancels():
    engine = FakeEngine([_tokens("abc"), _tokens("def"), DONE])
    stream = start_completion(engine, FakeInfo(), "p", ChatOptions.parse({}))
    for _ in stream:
        break
    assert engine.handles[0].cancels == 1


def test_chat_session_second_iteration_yields_nothing():
    engine = FakeEngine([_tokens("abc"), DONE])
    stream = start_completion(engine, FakeInfo(), "p", ChatOptions.parse({}))
    assert len(list(stream)) == 2
    assert list(stream) == []


def test_chat_session_tells_the_handle_once_output_shows():
    # "X" may start the stop string "XY": held back, nothing shown, the engine must keep
    # delivering every token at once; "Xb" shows, and from then on wake-ups may be batched.
    engine = FakeEngine([_tokens("X"), _tokens("b"), _tokens("c"), DONE])
    events = list(start_completion(engine, FakeInfo(), "p", ChatOptions.parse({"stop": ["XY"]})))
    assert events[0] == TextDelta("Xb")
    assert engine.requests[0].until_shown
    assert engine.handles[0].shown_after == 2
