"""REPL turn handling over a fake model (the real one is driven through a pty in e2e):
history, cancel on Ctrl-C, errors that keep the chat going, slash commands."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from mlxd.chat.chat_request import ChatRequest
from mlxd.chat.options import ChatOptions
from mlxd.cli.repl import Conversation, Repl, stats_text
from mlxd.cli.repl_input import PipeReader
from mlxd.errors import ContextOverflow
from mlxd.types import FinishEvent, FinishReason, TextDelta, Timings, Usage

DONE = FinishEvent(FinishReason.STOP, Usage(10, 3, 6), Timings(0.0, 0.1, 0.3))


@dataclass
class FakeStream:
    events: list[Any]
    interrupt_after: int | None = None
    cancelled: bool = False

    def __iter__(self) -> Iterator[Any]:
        for i, event in enumerate(self.events):
            if self.interrupt_after == i and not self.cancelled:
                raise KeyboardInterrupt
            if self.cancelled:
                yield FinishEvent(FinishReason.CANCELLED, Usage())
                return
            yield event

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeModel:
    """A cli.model_client.ModelClient."""

    streams: list[Any]
    asked: list[tuple[list[dict], Any]] = field(default_factory=list)
    name: str = "fake"
    takes_images: bool | None = None
    server_url: str | None = None

    def ask(self, request: ChatRequest) -> Any:
        self.asked.append((request.messages, request.template_kwargs))
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        return stream


def make_repl(*streams: Any, system: str | None = None) -> tuple[Repl, FakeModel]:
    model = FakeModel(list(streams))
    return Repl(model, Conversation(system=system), ChatOptions(), interactive=False), model  # type: ignore[arg-type]


def test_turns_accumulate_with_system_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    repl, model = make_repl(
        FakeStream([TextDelta("Hi!"), DONE]), FakeStream([TextDelta("Yes."), DONE]), system="S"
    )
    repl.answer("hello")
    repl.answer("more?")
    roles = [(m["role"], m["content"]) for m in model.asked[1][0]]
    assert roles == [("system", "S"), ("user", "hello"), ("assistant", "Hi!"), ("user", "more?")]
    assert capsys.readouterr().out == "Hi!\nYes.\n"
    text = stats_text(repl.conv)
    assert "prompt 10 tokens (6 cached)" in text and "session: 2 answers" in text


def test_stats_show_draft_counts_when_the_answer_speculated() -> None:
    drafted = FinishEvent(FinishReason.STOP, Usage(10, 9, 0), Timings(0.0, 0.1, 0.3, 8, 6))
    repl, _ = make_repl(FakeStream([TextDelta("a"), DONE]), FakeStream([TextDelta("b"), drafted]))
    repl.answer("one")
    assert "draft" not in stats_text(repl.conv)
    repl.answer("two")
    last, session = stats_text(repl.conv).splitlines()
    assert "completion 9 tokens (6 of 8 draft tokens accepted)" in last
    assert session.endswith("(6 of 8 draft tokens accepted)")


def test_ctrl_c_cancels_and_drops_the_turn(capsys: pytest.CaptureFixture[str]) -> None:
    stream = FakeStream([TextDelta("partial"), TextDelta("never"), DONE], interrupt_after=1)
    repl, _ = make_repl(stream)
    repl.answer("hello")
    assert stream.cancelled
    assert repl.conv.turns == [] and repl.conv.last is None
    assert "[answer cancelled]" in capsys.readouterr().err


def test_errors_are_reported_and_the_chat_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    failed = FinishEvent(FinishReason.ERROR, Usage(), error="boom", error_code="engine_error")
    repl, _ = make_repl(
        ContextOverflow("prompt has 5000 tokens, window 2048"),
        FakeStream([failed]),
        FakeStream([TextDelta("ok"), DONE]),
    )
    repl.loop(PipeReader(io.StringIO("too long\nfails\nworks\n")))
    err = capsys.readouterr().err.splitlines()
    assert err == ["mlxd: error: prompt has 5000 tokens, window 2048", "mlxd: error: boom"]
    assert [t["content"] for t in repl.conv.turns] == ["works", "ok"]


def test_slash_commands(capsys: pytest.CaptureFixture[str]) -> None:
    repl, model = make_repl(FakeStream([TextDelta("a"), DONE]), FakeStream([DONE]))
    repl.loop(PipeReader(io.StringIO("q\n/system Be kind.\n/reasoning off\nq2\n/bye\nnever\n")))
    assert repl.conv.system == "Be kind." and repl.conv.think is False
    messages, template_kwargs = model.asked[1]
    assert messages[0] == {"role": "system", "content": "Be kind."}
    assert len(messages) == 2  # /system started a new conversation
    assert template_kwargs == {"enable_thinking": False}
    assert not repl.conv.show_reasoning
    assert len(model.asked) == 2  # /bye stopped before "never"
