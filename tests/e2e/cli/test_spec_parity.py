"""The one-engine contract with speculation (issue 14): `mlxd run --json --draft-kind ngram`
content == the same request's content without speculation == a real `mlxd serve
--draft-kind ngram`'s content through the official client, also when the request turns
speculation off or lowers num_draft_tokens; drafted/accepted counts reach run --json timings
and /metrics."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.checkpoints import make_checkpoint
from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd
from tests.e2e.cli.serve_helper import mlxd_server
from tests.e2e.cli.test_parity import offline_env
from tests.integration.chat.scripted import EOS, make_scripted_checkpoint

PROMPT = "Hello, how are you today?"
MAX_TOKENS = 48
# Weights at a fifth of the tiny checkpoints' scale: greedy output falls into repeated words
# and runs ("of of of ..."), which prompt lookup drafts and the target accepts.
WEIGHT_SCALE = 0.2


@pytest.fixture(scope="module")
def looping_model(checkpoints_dir: Path) -> Path:
    import mlx.core as mx

    path = checkpoints_dir / "tiny-chat-looping"
    if not path.exists():
        shutil.copytree(make_checkpoint(checkpoints_dir / "tiny-chat-for-looping", "chat"), path)
        weights = mx.load(str(path / "model.safetensors"))
        scaled = {k: v if "norm" in k else v * WEIGHT_SCALE for k, v in weights.items()}
        mx.save_safetensors(str(path / "model.safetensors"), scaled, metadata={"format": "mlx"})
    return path


@pytest.fixture(scope="module")
def server(
    looping_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[openai.OpenAI, str, dict[str, str]]]:
    env = offline_env(tmp_path_factory.mktemp("spec-parity-home"))
    env["MLXD_DRAFT_POLICY"] = "every"  # draft counts that repeat across processes
    flags = ("--draft-kind", "ngram", "--num-draft-tokens", "4")
    with mlxd_server(looping_model, env, extra=flags) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        yield client, base_url.removesuffix("/v1"), env


def run_json(model: Path, env: dict[str, str], *flags: str) -> dict:
    proc = run_mlxd(
        "run", str(model), PROMPT, "--max-tokens", str(MAX_TOKENS), "--temperature", "0",
        "--json", *flags, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return one_json_line(proc.stdout)


def draft_totals(base: str) -> tuple[int, int]:
    text = httpx.get(base + "/metrics", timeout=10).text

    def value(name: str) -> int:
        match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        assert match, f"{name} missing from /metrics"
        return int(float(match.group(1)))

    return value("mlxd_draft_tokens_total"), value("mlxd_accepted_draft_tokens_total")


def test_run_json_with_ngram_equals_plain_and_the_server(
    server: tuple[openai.OpenAI, str, dict[str, str]], looping_model: Path
) -> None:
    client, base, env = server
    spec = run_json(looping_model, env, "--draft-kind", "ngram")
    plain = run_json(looping_model, env)
    assert spec["content"] and spec["content"] == plain["content"]
    assert spec["usage"] == plain["usage"]
    assert 0 < spec["timings"]["accepted_draft_tokens"] <= spec["timings"]["draft_tokens"]
    assert plain["timings"]["draft_tokens"] == plain["timings"]["accepted_draft_tokens"] == 0

    def served(extra: dict | None) -> str:
        reply = client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=MAX_TOKENS,
            temperature=0,
            extra_body=extra,
        )
        assert reply.usage and reply.usage.completion_tokens == spec["usage"]["completion_tokens"]
        return reply.choices[0].message.content or ""

    before = draft_totals(base)
    assert served(None) == spec["content"]  # the serve flag's default: ngram, K=4
    after = draft_totals(base)
    counts = spec["timings"]["draft_tokens"], spec["timings"]["accepted_draft_tokens"]
    assert (after[0] - before[0], after[1] - before[1]) == counts  # same engine, same drafts
    assert served({"draft_kind": "none"}) == spec["content"]
    assert draft_totals(base) == after  # turned off for this request: nothing drafted
    assert served({"num_draft_tokens": 1}) == spec["content"]
    lowered = draft_totals(base)
    lowered_counts = lowered[0] - after[0], lowered[1] - after[1]
    assert lowered_counts[0] > 0 and lowered_counts != counts  # K=1 drafts differently


def test_chat_stats_show_the_answers_draft_counts(
    server: tuple[openai.OpenAI, str, dict[str, str]], looping_model: Path
) -> None:
    _, _, env = server
    spec = run_json(looping_model, env, "--draft-kind", "ngram")
    proc = run_mlxd(
        "chat", str(looping_model), "--draft-kind", "ngram", "--max-tokens", str(MAX_TOKENS),
        "--temperature", "0", input=f"{PROMPT}\n/stats\n", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    timings = spec["timings"]
    counts = f"({timings['accepted_draft_tokens']} of {timings['draft_tokens']} draft tokens"
    assert proc.stdout.count(counts) == 2  # the last answer and the session


SCRIPT = ["Alpha", " beta", " gamma", " delta", " epsilon", " zeta", " eta", " theta"]
# The prompt ends in the script's tokens, then EOS (the template writes them: a message's
# text is never read as added tokens), so prompt lookup can draft past the answer's EOS.
EOS_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}" + "".join(SCRIPT) + EOS


def test_drafts_past_the_eos_are_not_accepted(
    server: tuple[openai.OpenAI, str, dict[str, str]],
) -> None:
    """Greedy, the scripted model answers its 8 chunks then EOS. Prompt lookup drafts 4 at
    " beta" (all accepted), then 4 at " eta": " theta", EOS and two tokens after the EOS, which
    the target accepts too but which end nowhere: 8 drafted, 6 accepted, in run --json and in
    /metrics alike."""
    client, base, env = server
    path = Path(env["MLXD_HOME"]) / "models" / "scripted-eos"
    make_scripted_checkpoint(path, SCRIPT, template=EOS_TEMPLATE)
    proc = run_mlxd(
        "run", str(path), "Go.", "--max-tokens", "40", "--temperature", "0",
        "--draft-kind", "ngram", "--num-draft-tokens", "4", "--json", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["content"] == "".join(SCRIPT) and body["usage"]["completion_tokens"] == 9
    assert (body["timings"]["draft_tokens"], body["timings"]["accepted_draft_tokens"]) == (8, 6)
    before = draft_totals(base)
    reply = client.chat.completions.create(
        model="scripted-eos",
        messages=[{"role": "user", "content": "Go."}],
        max_tokens=40,
        temperature=0,
    )
    assert reply.choices[0].message.content == "".join(SCRIPT)
    after = draft_totals(base)
    assert (after[0] - before[0], after[1] - before[1]) == (8, 6)
