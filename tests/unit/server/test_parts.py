"""Server parts without a model: Host guard, model-name guard, metrics text, wire chunks,
error codes, drain bookkeeping."""

from __future__ import annotations

import asyncio

import pytest

from mlxd import errors as E
from mlxd.engine.stats import Counters, EngineStats, PrefixCacheStats
from mlxd.errors import from_code, one_line
from mlxd.server.guard.middleware import host_is_loopback, route_label
from mlxd.server.lifecycle import Lifecycle
from mlxd.server.metrics import Histogram, Metrics
from mlxd.server.openai.wire import ChatWire, CompletionWire
from mlxd.server.served_models import check_model_name
from mlxd.server.settings import is_loopback_host
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Usage


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("localhost", True),
        ("localhost:8080", True),
        ("127.0.0.1:1", True),
        ("[::1]:8080", True),
        ("[::1]", True),
        ("LOCALHOST", True),
        ("evil.com", False),
        ("127.0.0.1.evil.com", False),
        ("localhost.evil.com:80", False),
        ("", False),
        ("10.0.0.1:8080", False),
    ],
)
def test_host_header_guard(host: str, ok: bool) -> None:
    assert host_is_loopback(host) is ok


def test_loopback_bind_detection() -> None:
    assert is_loopback_host("127.0.0.1") and is_loopback_host("::1")
    assert is_loopback_host("localhost") and is_loopback_host("127.0.0.2")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("192.168.1.2")


@pytest.mark.parametrize(
    "name", ["/etc/passwd", "../x", "a/../b", "~/m", "~root", "a\\b", "./m", ".hidden", "x\x00y"]
)
def test_path_like_model_names_are_refused(name: str) -> None:
    with pytest.raises(E.InvalidRequest):
        check_model_name(name)


@pytest.mark.parametrize("name", ["tiny-chat", "mlx-community/Qwen3-0.6B-4bit", "org/name@main"])
def test_store_names_pass(name: str) -> None:
    check_model_name(name)


def test_route_labels_are_bounded() -> None:
    assert route_label("/v1/models/org/name") == "/v1/models/{id}"
    assert route_label("/anything/else") == "other"


def test_histogram_is_cumulative() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.5, 0.5, 3.0):
        h.observe(v)
    lines = list(h.lines("x"))
    assert lines[:3] == ['x_bucket{le="0.1"} 1', 'x_bucket{le="1.0"} 3', 'x_bucket{le="+Inf"} 4']
    assert lines[-1] == "x_count 4"


STATS = EngineStats(
    running=2,
    waiting=5,
    counters=Counters(
        prefix_cache_hits=7,
        cached_tokens_total=70,
        prefix_cache_misses=3,
        prompt_tokens_total=10,
        generation_tokens_total=4,
        by_reason={"stop": 3, "cancelled": 1},
    ),
    cache=PrefixCacheStats(evictions=4, pruned=6, bytes=4096, entries=2),
)


def test_metrics_text() -> None:
    m = Metrics()
    m.count_request("/v1/chat/completions", 200)
    m.count_request("/v1/chat/completions", 200)
    m.finished["cancelled"] += 1
    m.finished["tool_calls"] += 2
    text = m.render(STATS, active_http=1)
    assert 'mlxd_http_requests_total{route="/v1/chat/completions",status="200"} 2' in text
    assert "\nmlxd_running_requests 2\n" in text and "\nmlxd_queue_depth 5\n" in text
    assert 'mlxd_requests_finished_total{reason="cancelled"} 1' in text
    assert 'mlxd_requests_finished_total{reason="tool_calls"} 2' in text
    assert 'mlxd_requests_finished_total{reason="length"} 0' in text  # every reason, always
    assert "\nmlxd_prompt_tokens_total 10\n" in text
    assert "\nmlxd_generation_tokens_total 4\n" in text
    for name, value in [("hits_total", 7), ("misses_total", 3), ("evictions_total", 4),
                        ("pruned_total", 6), ("bytes", 4096), ("entries", 2)]:  # fmt: skip
        assert f"\nmlxd_prefix_cache_{name} {value}\n" in text
    assert "\nmlxd_cached_prompt_tokens_total 70\n" in text
    assert "# TYPE mlxd_time_to_first_token_seconds histogram" in text
    assert text.endswith("\n")


def test_error_codes_keep_their_status() -> None:
    assert from_code("queue_full", "x").http_status == 429
    assert from_code("context_length_exceeded", "x").http_status == 400
    assert from_code("unavailable", "x").http_status == 503
    assert from_code(None, "x").http_status == 500
    assert from_code("no_such_code", None).message == "generation failed"


def test_one_line_is_the_first_line_and_never_empty() -> None:
    err = ValueError("  bad value\n  at line 2\n")
    assert one_line(err) == "ValueError: bad value"
    assert one_line(err, with_type=False) == "bad value"
    assert one_line(KeyError(), with_type=False) == one_line(KeyError()) == "KeyError"
    assert one_line(None) == "unknown error"
    assert one_line(err, with_type=False, whole=True) == "bad value at line 2"
    assert one_line(ValueError(" \n "), whole=True) == "ValueError"


def test_every_error_class_comes_back_from_its_code() -> None:
    classes = [c for c in vars(E).values() if isinstance(c, type) and issubclass(c, E.MlxdError)]
    coded = [c for c in classes if c.code is not None]
    assert len(coded) == len(classes) - 1  # all but MlxdError itself
    for cls in coded:
        assert type(from_code(cls.code, "x")) is cls


USAGE = Usage(prompt_tokens=5, completion_tokens=3, cached_tokens=2)
EVENTS = [
    ReasoningDelta("hm"),
    TextDelta("Hel"),
    TextDelta("lo"),
    ToolCall(id="call_1", name="f", arguments='{"a": 1}', index=0),
    FinishEvent(FinishReason.STOP, USAGE),
]


def test_chat_wire_body() -> None:
    wire = ChatWire(model="m")
    for ev in EVENTS[:-1]:
        wire.add(ev)
    body = wire.response(EVENTS[-1])  # type: ignore[arg-type]
    msg = body["choices"][0]["message"]
    assert msg["content"] == "Hello" and msg["reasoning_content"] == msg["reasoning"] == "hm"
    assert msg["tool_calls"][0] == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": 1}'},
    }
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_chat_wire_chunks_with_usage() -> None:
    wire = ChatWire(model="m", include_usage=True)
    chunks = [wire.first_chunk()] + [c for ev in EVENTS for c in wire.chunks(ev)]
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": "", "refusal": None}
    assert deltas[1] == {"reasoning_content": "hm", "reasoning": "hm"}
    assert deltas[2] == {"content": "Hel"}
    assert deltas[4]["tool_calls"][0]["id"] == "call_1"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 8
    assert all(c["usage"] is None for c in chunks[:-1])
    assert len({c["id"] for c in chunks}) == 1


def test_completion_wire() -> None:
    wire = CompletionWire(model="m")
    for ev in EVENTS:
        if not isinstance(ev, FinishEvent):
            wire.add(ev)
    body = wire.response(FinishEvent(FinishReason.LENGTH, USAGE))
    assert body["choices"][0]["text"] == "Hello"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["logprobs"] is None


class _Stream:
    def __init__(self) -> None:
        self.cancelled = 0

    def cancel(self) -> None:
        self.cancelled += 1


def test_drain_waits_then_aborts_leftovers() -> None:
    async def scenario() -> tuple[int, int, _Stream, _Stream]:
        life = Lifecycle()
        quick, slow = _Stream(), _Stream()
        g1, _g2 = life.begin(quick), life.begin(slow)
        asyncio.get_running_loop().call_later(0.01, life.end, g1)
        aborted = await life.drain(0.2)
        with pytest.raises(E.EngineUnavailable):
            life.begin(_Stream())
        return aborted, len(life.active), quick, slow

    aborted, active, quick, slow = asyncio.run(scenario())
    assert aborted == 1 and active == 1  # the slow one is aborted; its stream ends it later
    assert quick.cancelled == 0 and slow.cancelled == 1


def test_drain_with_nothing_running_returns_at_once() -> None:
    assert asyncio.run(Lifecycle().drain(60.0)) == 0


def test_sse_data_lines_survive_clients_that_split_on_unicode_line_breaks() -> None:
    # A random model can emit U+0085 or U+2028 in content; httpx's aiter_lines (str.splitlines)
    # would cut the `data:` line there and the client would read broken JSON.
    import json

    from mlxd.server.sse import event

    text = "a\x85b\u2028c\u2029d é\n"
    line = event({"content": text}).decode()
    data_lines = [x for x in line.splitlines() if x]
    assert len(data_lines) == 1
    assert json.loads(data_lines[0].removeprefix("data: "))["content"] == text
    assert "é" in data_lines[0]  # other non-ASCII stays raw UTF-8
