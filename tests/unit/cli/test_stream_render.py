"""The event renderer: streaming vs --no-stream vs --json collection, reasoning routing,
tool calls as JSON lines, errors mapped to MlxdError classes (exit codes)."""

from __future__ import annotations

import io
import json

import pytest

from mlxd.cli.stream_render import Answer, Renderer, check_finish, error_from_finish
from mlxd.errors import ContextOverflow, EngineFault, MlxdError
from mlxd.types import (
    FinishEvent,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    Timings,
    ToolCall,
    Usage,
    Warning,
)

FINISH = FinishEvent(FinishReason.STOP, Usage(7, 5, 3), Timings(0.0, 0.1, 0.5))
EVENTS = [
    ReasoningDelta("let me "),
    ReasoningDelta("think"),
    TextDelta("Hello"),
    TextDelta(", world"),
    ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
    Warning("odd\nthing"),
    FINISH,
]


def render(stream: bool, quiet: bool = False, show_reasoning: bool = True):
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(
        Answer("m"), stream=stream, quiet=quiet, show_reasoning=show_reasoning, out=out, err=err
    )
    answer = renderer.consume(EVENTS)
    return answer, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("stream", [True, False])
def test_text_on_stdout_reasoning_on_stderr_tool_call_as_json(stream: bool) -> None:
    answer, out, err = render(stream)
    lines = out.splitlines()
    assert lines[0] == "Hello, world"
    assert json.loads(lines[1]) == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    assert out.endswith("\n") and len(lines) == 2
    assert "let me think" in err
    assert "mlxd: warning: odd thing\n" in err  # one line
    assert "\x1b[" not in err  # not a terminal: no colour codes
    assert answer.content == "Hello, world" and answer.reasoning == "let me think"


def test_hidden_reasoning_and_quiet_mode() -> None:
    _, out, err = render(True, show_reasoning=False)
    assert "think" not in err and out.startswith("Hello")
    answer, out, err = render(True, quiet=True)
    assert out == "" and err == ""
    assert answer.content == "Hello, world"


def test_json_shape() -> None:
    answer, _, _ = render(False, quiet=True)
    body = answer.to_json()
    assert set(body) >= {
        "model",
        "content",
        "reasoning",
        "tool_calls",
        "finish_reason",
        "usage",
        "timings",
    }
    assert body["finish_reason"] == "stop"
    assert body["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 5,
        "total_tokens": 12,
        "cached_tokens": 3,
    }
    assert body["timings"]["decode_tokens_per_s"] == pytest.approx(4 / 0.4)
    assert body["tool_calls"][0]["function"]["name"] == "get_weather"
    json.dumps(body)


def test_error_finish_maps_to_error_class() -> None:
    code = ContextOverflow.code
    finish = FinishEvent(FinishReason.ERROR, Usage(), error="too long", error_code=code)
    err = error_from_finish(finish)
    assert isinstance(err, ContextOverflow) and err.exit_code == 2
    assert isinstance(error_from_finish(FinishEvent(FinishReason.ERROR, Usage())), EngineFault)
    with pytest.raises(MlxdError):
        check_finish(Answer("m", finish=finish))
    with pytest.raises(EngineFault):
        check_finish(Answer("m"))  # no FinishEvent at all
    check_finish(Answer("m", finish=FINISH))
