"""Claude Code's own requests against a real `mlxd serve`, through the official anthropic SDK:
a recorded Claude Code request (recordings/claude_code_2_1_332.json says where it comes from)
replayed as its model names arrive, `claude-*` served through `--alias`."""

from __future__ import annotations

import copy
import inspect
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env

RECORDING = json.loads(
    (Path(__file__).parent / "recordings" / "claude_code_2_1_332.json").read_text()
)
# The recording's model name is one the SDK warns is retired; here it only selects the alias.
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
_SDK_FIELDS = set(inspect.signature(anthropic.Anthropic().messages.create).parameters)


@pytest.fixture(scope="module")
def cc_server(server_home: Path) -> Iterator[ServerProcess]:
    """tiny-long (a 64k window) serving every `claude-*` name, as docs/usage/serve.md says;
    keep-alives after 20 ms of silence (the default is 10 s), so a prefill sends some."""
    env = server_env(server_home, MLXD_STREAM_KEEPALIVE="0.02")
    srv = launch(["--model", "tiny-long", "--alias", "claude-*=default"], env)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def claude(cc_server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=cc_server.url, api_key="unused", max_retries=0, timeout=300)


def recorded(header: str | None = None, **changes: Any) -> dict[str, Any]:
    """The recorded request (max_tokens and the thinking budget made small), with system[0]
    replaced by `header` if given."""
    body = copy.deepcopy(RECORDING["request"])
    body["max_tokens"], body["thinking"]["budget_tokens"] = 4, 1
    body["stream"] = False
    if header is not None:
        body["system"][0]["text"] = header
    body.update(changes)
    return body


def send(claude: anthropic.Anthropic, body: dict[str, Any]) -> Any:
    """messages.create with the fields the SDK names; the rest (context_management) as extra."""
    known = {k: v for k, v in body.items() if k in _SDK_FIELDS}
    extra = {k: v for k, v in body.items() if k not in _SDK_FIELDS}
    headers = {"anthropic-beta": RECORDING["anthropic_beta"]}
    return claude.messages.create(**known, extra_body=extra, extra_headers=headers)


def test_billing_header_does_not_defeat_the_prefix_cache(claude: anthropic.Anthropic) -> None:
    """Two requests that differ only in Claude Code's billing header (system[0]; its hash
    changes with the prompt): the second reads all of the first's prompt from the cache but
    its last token (the prefix cache's rule)."""
    first_header, second_header = RECORDING["billing_headers"]
    assert first_header != second_header
    first = send(claude, recorded(first_header))
    second = send(claude, recorded(second_header))
    prompt = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    assert prompt > 1000  # the recording's system prompt, tools and reminders
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == prompt
    assert second.usage.cache_read_input_tokens == prompt - 1, (prompt, second.usage)
    assert (
        claude.messages.count_tokens(
            model="claude-sonnet-4-5", system=recorded(second_header)["system"], messages=USER
        ).input_tokens
        == claude.messages.count_tokens(
            model="claude-sonnet-4-5", system=recorded(first_header)["system"], messages=USER
        ).input_tokens
    )


USER: list[Any] = [{"role": "user", "content": "Say hello"}]


def test_prompt_too_long_in_anthropic_words(claude: anthropic.Anthropic) -> None:
    """Claude Code reads `prompt is too long: N tokens > M maximum` to compact; OpenAI
    clients read `context_length_exceeded` and OpenAI's sentence ('tiny-short': 128 tokens)."""
    long_turn = [{"role": "user", "content": "Paris is lovely. " * 60}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="tiny-short", max_tokens=4, messages=long_turn)  # type: ignore[arg-type]
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    found = re.fullmatch(r"prompt is too long: (\d+) tokens > 127 maximum", error["message"])
    assert found is not None and int(found.group(1)) > 127, error
    with pytest.raises(openai.BadRequestError) as by_openai:
        openai_client(claude).chat.completions.create(
            model="tiny-short",
            max_tokens=4,
            messages=long_turn,  # type: ignore[arg-type]
        )
    assert by_openai.value.code == "context_length_exceeded"
    assert "maximum context length is 128 tokens" in by_openai.value.message


def test_models_list_has_anthropic_fields_and_the_window(claude: anthropic.Anthropic) -> None:
    models = list(claude.models.list())
    first = models[0]  # the preloaded model
    assert first.type == "model" and first.display_name == first.id
    assert first.created_at.year >= 2026
    assert first.max_input_tokens == 65535  # tiny-long: a 64k window
    short = claude.models.retrieve("tiny-short")
    assert short.max_input_tokens == 127 and short.model_extra["context_window"] == 128  # type: ignore[index]
    listed = {m.id: m for m in openai_client(claude).models.list()}
    assert listed["tiny-short"].context_window == 128  # type: ignore[attr-defined]


def test_hosted_model_names_404_with_the_alias_hint(claude: anthropic.Anthropic) -> None:
    """`claude-*` is aliased on this server; `gpt-*` is not: the 404 says how to alias it."""
    with pytest.raises(anthropic.NotFoundError) as unknown:
        claude.messages.create(model="gpt-5", max_tokens=4, messages=USER)
    assert "--alias 'gpt-*=default'" in unknown.value.message
    assert "mlxd pull" not in unknown.value.message


def openai_client(claude: anthropic.Anthropic) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{claude.base_url}/v1", api_key="unused", max_retries=0)


def fresh(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with a prompt no earlier request started with: all of it is prefilled."""
    body["system"][1]["text"] = f"Session {uuid.uuid4()}. " + body["system"][1]["text"]
    return body


def test_pings_while_the_prompt_prefills(cc_server: ServerProcess) -> None:
    """A ping right after message_start, then more while the 9.6k-token prompt prefills (and
    nothing else comes), before the first content block."""
    body = fresh(recorded(stream=True))
    headers = {"anthropic-beta": RECORDING["anthropic_beta"], "x-api-key": "unused"}
    with httpx.stream(
        "POST", cc_server.base_url + "/messages", json=body, headers=headers, timeout=300
    ) as r:
        names = [line[len("event: ") :] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "ping"]
    first_block = names.index("content_block_start")
    assert names[2:first_block].count("ping") >= 1, names[:first_block]
    assert set(names[2:first_block]) == {"ping"}
    assert names[-2:] == ["message_delta", "message_stop"]


def test_sdk_streams_parse_through_pings(claude: anthropic.Anthropic) -> None:
    """The SDK skips pings; message_start's usage already has the cache split (a prompt
    sent again: all of it but its last token read from the cache)."""
    body = fresh(recorded())
    whole = send(claude, body)
    prompt = whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)
    known = {k: v for k, v in body.items() if k in _SDK_FIELDS and k != "stream"}
    headers = {"anthropic-beta": RECORDING["anthropic_beta"]}
    with claude.messages.stream(
        **known,
        extra_body={"context_management": body["context_management"]},
        extra_headers=headers,
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = events[0]
    assert start.type == "message_start"
    assert start.message.usage.cache_read_input_tokens == prompt - 1
    assert start.message.usage.input_tokens == 1
    assert final.usage.cache_read_input_tokens == prompt - 1
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_openai_streams_send_comments_while_prefilling(claude: anthropic.Anthropic) -> None:
    """Chat completions and Responses streams send `: keep-alive` comments during a long
    prefill; the openai SDK's streams parse through them."""

    def long_turn() -> list[dict[str, str]]:  # a new one each time: never a prefix-cache hit
        return [{"role": "user", "content": f"{uuid.uuid4()} " + "Paris is lovely. " * 800}]

    chat = {"model": "default", "messages": long_turn(), "max_tokens": 2, "stream": True}
    responses = {"model": "default", "input": long_turn(), "max_output_tokens": 2, "stream": True}
    base = f"{claude.base_url}/v1"
    for path, body in (("/chat/completions", chat), ("/responses", responses)):
        with httpx.stream("POST", base + path, json=body, timeout=300) as r:
            lines = [line for line in r.iter_lines() if line]
        first_data = next(i for i, line in enumerate(lines) if line.startswith(("data:", "event:")))
        assert ": keep-alive" in lines[first_data:], (path, lines[:8])
    client = openai_client(claude)
    chunks = list(client.chat.completions.create(**{**chat, "messages": long_turn()}))
    assert chunks[-1].choices[0].finish_reason == "length"
    kinds = [e.type for e in client.responses.create(**{**responses, "input": long_turn()})]
    assert kinds[0] == "response.created" and kinds[-1] in (
        "response.completed",
        "response.incomplete",
    )


def test_head_and_get_root(cc_server: ServerProcess) -> None:
    """A client checking the server is there (HEAD / or GET /) gets a 200, without a key."""
    head = httpx.head(cc_server.url + "/", timeout=30)
    assert head.status_code == 200 and head.content == b""
    got = httpx.get(cc_server.url + "/", timeout=30)  # the chat page (JSON under --no-web)
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/html")
    assert httpx.head(cc_server.url + "/health", timeout=30).status_code == 200


def test_mcp_servers_are_refused_not_ignored(claude: anthropic.Anthropic) -> None:
    servers = [{"type": "url", "url": "https://example.com/sse", "name": "example"}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=4,
            messages=USER,
            extra_body={"mcp_servers": servers},
        )
    assert "mcp_servers" in refused.value.message and "MCP" in refused.value.message
    ok = claude.messages.create(
        model="claude-sonnet-4-5", max_tokens=2, messages=USER, extra_body={"mcp_servers": []}
    )
    assert ok.usage.output_tokens >= 1


def test_a_system_turn_in_messages(claude: anthropic.Anthropic) -> None:
    """Claude Code 2.1.332 sends its environment as a `system` turn after the first user
    turn, the last message (seen when `claude -p` ran against mlxd serve, 2026-12-01): it is
    rendered in place, and count_tokens agrees."""
    body = recorded()
    user = body["messages"][0]
    reminder = {"role": "system", "content": [{"type": "text", "text": "# Environment\nlinux"}]}
    body["messages"] = [user, reminder]
    answer = send(claude, body)
    assert answer.stop_reason in ("end_turn", "max_tokens")
    counted = claude.messages.count_tokens(
        model="claude-sonnet-4-5", system=body["system"], messages=body["messages"]
    ).input_tokens
    alone = claude.messages.count_tokens(
        model="claude-sonnet-4-5", system=body["system"], messages=[user]
    ).input_tokens
    assert counted > alone


def test_assistant_prefill_is_continued(claude: anthropic.Anthropic) -> None:
    """A final assistant turn is the start of the answer (Anthropic's prefill): the prompt
    ends inside it, so it counts its text and no new turn; the answer holds only what
    follows. An empty final turn is as if absent."""
    ask: list[Any] = [{"role": "user", "content": "Capital of France?"}]
    prefill = [*ask, {"role": "assistant", "content": "The capital is"}]
    answer = claude.messages.create(model="claude-sonnet-4-5", max_tokens=3, messages=prefill)
    assert answer.role == "assistant" and answer.usage.output_tokens >= 1
    count = claude.messages.count_tokens
    plain = count(model="claude-sonnet-4-5", messages=ask).input_tokens
    assert count(model="claude-sonnet-4-5", messages=prefill).input_tokens > plain
    empty = [*ask, {"role": "assistant", "content": ""}]
    assert count(model="claude-sonnet-4-5", messages=empty).input_tokens == plain
    tool_only = [*ask, {"role": "assistant", "content": [TOOL_USE]}]
    with pytest.raises(anthropic.BadRequestError, match="continued from its text only"):
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=3, messages=tool_only)


TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}
