"""kv_memory_bench's server part (`--peers`): mlxd and its peers with their KV quantization on the
same checkpoint, each as a real server on 127.0.0.1 given the same load: --conversations
streaming requests at once, each about --context tokens decoding --decode-tokens tokens. Each
is a text completion (/v1/completions) of the chat template's rendering of a user message with
the assistant's answer begun ("The words are: river stone ..."): asked in chat, the demo model's
greedy answer at 4k context is EOS at once, and Rapid-MLX can suppress EOS for no HTTP request
(its chat and completion requests have no `ignore_eos` field, pydantic drops it, and it refuses
`logit_bias`), so its streams stopped after one token; with the answer begun every server
decodes the asked tokens (the others also get EOS suppressed by logit_bias; `tokens` in the
result shows each stream's count). The prompts share all but their last ~70 tokens, sent once
alone first, so each server's prefix cache pays that prefill once (its stored copy counts in
the "before" figure; every row of the wave still holds its own KV). Per server: its resident
memory before the load and at its peak (VmRSS of the server's process tree, sampled every 0.1
s), the per-conversation growth ((peak - before) / conversations) and how many such
conversations the fixed budget would hold at that rate, decode tokens/s (tokens after each
request's first, over the time any request was decoding: the union of their decode intervals,
so a server that serves one request at a time is measured while it decodes, not while the
others wait) and the wave's wall time. Every server runs on MKL (a peer by preloading it).

What each peer's flag quantizes (their --help): vllm-mlx's `--kv-cache-quantization` the
*stored* (prefix) caches; Rapid-MLX's `--kv-cache-dtype int8|int4` the live cache;
`mlx_lm.server --kv-bits` the live cache from `--quantized-kv-start` on (default 5000, here
0) and serves one request at a time.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import (
    ROOT,
    blas_env,
    eos_id,
    free_port,
    isolated_env,
    mlxd_serve,
    progress,
    scratch,
    stop,
    stream_chat,
    wait_ready,
)

WORDS = (
    "river stone light cloud paper music garden window silver orange forest engine winter "
    "harbor candle letter bridge mountain market signal planet morning thunder violet ocean"
).split()


def peer_commands(args: Any, model: Path, port: int) -> dict[str, list[str]]:
    """Each server of --peers, by name, at its 8-bit KV setting (name-0: full precision)."""
    py = args.mlx_lm_python
    bits, group = str(args.peer_bits), str(args.kv_group_size)
    rapid_dtype = {8: "int8", 4: "int4"}[args.peer_bits]
    commands = {
        "mlxd": mlxd_serve(model, port, "--kv-bits", bits, "--kv-group-size", group),
        "mlxd-0": mlxd_serve(model, port),
        "mlx_lm": [py, "-m", "mlx_lm.server", "--model", str(model), "--port", str(port),
                   "--kv-bits", bits, "--quantized-kv-start", "0"],
        "mlx_lm-0": [py, "-m", "mlx_lm.server", "--model", str(model), "--port", str(port)],
        "vllm-mlx": [args.vllm_mlx, "serve", str(model), "--port", str(port),
                     "--continuous-batching", "--kv-cache-quantization",
                     "--kv-cache-quantization-bits", bits],
        "vllm-mlx-0": [args.vllm_mlx, "serve", str(model), "--port", str(port),
                       "--continuous-batching"],
        "rapid-mlx": [args.rapid_mlx, "serve", str(model), "--port", str(port),
                      "--kv-cache-dtype", rapid_dtype],
        "rapid-mlx-0": [args.rapid_mlx, "serve", str(model), "--port", str(port)],
    }  # fmt: skip
    return commands


def run_peers(args: Any, model: Path) -> dict[str, Any]:
    """Every server of --peers (comma-separated names of `peer_commands`) under one load."""
    shared = shared_text(model, max(args.context - 100, 16))
    prompts = [completion_text(model, prompt_text(shared, i)) for i in range(args.conversations)]
    args.shared_prompt = completion_text(model, f"{shared}\nConversation warm-up. Summarize.")
    args.model_dir = model
    eos = eos_id(model)
    out: dict[str, Any] = {}
    for name in args.peers.split(","):
        progress("peer", name)
        port = free_port()
        cmd = peer_commands(args, model, port)[name]
        try:
            out[name] = serve_and_load(name, cmd, port, prompts, eos, args)
        except (RuntimeError, httpx.HTTPError, ValueError) as exc:
            if name.startswith("mlxd"):
                raise
            out[name] = {"error": str(exc)[-600:]}  # a peer failing leaves the others
    return out


def shared_text(model: Path, tokens: int) -> str:
    """About `tokens` tokens of text (the model's tokenizer) every conversation starts with."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    words = [WORDS[(i * 13 + i // 25) % len(WORDS)] for i in range(tokens)]
    return str(tokenizer.decode(tokenizer.encode(" ".join(words))[:tokens]))


# The answer begun: the demo model then copies the list on (greedy, every one of 8 prompts ran
# its 32 tokens on Rapid-MLX at 1k and 4k; "The words are: river stone" alone stopped 2 of 16)
ANSWER_START = "The words are: " + " ".join(WORDS[:11])


def completion_text(model: Path, message: str) -> str:
    """The chat template's rendering of one user `message`, the assistant's answer begun."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    chat = [{"role": "user", "content": message}]
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    return f"{text}{ANSWER_START}"


def prompt_text(shared: str, client: int) -> str:
    """Conversation `client`: the shared text, then about 64 tokens of its own."""
    own = " ".join(WORDS[(client * 7 + i * (client + 3)) % len(WORDS)] for i in range(40))
    return f"{shared}\nConversation {client}: {own}. Summarize."


def serve_and_load(
    name: str, cmd: list[str], port: int, prompts: list[str], eos: int, args: Any
) -> dict[str, Any]:
    work = scratch("kv-peer-")
    log = (work / "server.log").open("wb")
    env = blas_env(isolated_env(work), "mkl", cmd[0], peer=not name.startswith("mlxd"))
    if name.startswith("mlxd"):
        env["PYTHONPATH"] = str(ROOT / "src")
        # 8 x 4k prefill over 8-bit KV on a loaded CPU can go 120 s (the default) without a
        # step's end: its watchdog then failed every request (503) at ~5 min under load ~8
        env.setdefault("MLXD_WATCHDOG_SECONDS", "1800")
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
    )
    try:
        url = wait_ready(proc, port, name, seconds=300.0)
        served = "default" if name.startswith("mlxd") else str(args.model_dir)
        # The shared part once, alone: each server's prefix cache then serves it to the
        # wave's rows (each still holds its own KV), so its prefill is paid once.
        asyncio.run(wave(url, served, name, [args.shared_prompt], eos, 1))
        before = tree_rss(proc.pid)
        sampler = PeakRss(proc.pid)
        sampler.start()
        began = time.perf_counter()
        samples = asyncio.run(wave(url, served, name, prompts, eos, args.decode_tokens))
        wall = time.perf_counter() - began
        peak = sampler.finish()
    finally:
        stop(proc, 60.0)
        log.close()
    growth = max(peak - before, 1) // len(prompts)
    return {
        "command": " ".join(["python", *cmd[1:]] if "python" in Path(cmd[0]).name else cmd),
        "rss_before_bytes": before,
        "peak_rss_bytes": peak,
        "rss_per_conversation_bytes": growth,
        "conversations_in_budget": args.budget_bytes // growth,
        "decode_tokens_per_s": decode_rate(samples),
        "first_tokens_s": [
            round(min(s["first"] for s in samples), 2),
            round(max(s["first"] for s in samples), 2),
        ],
        "wave_wall_s": round(wall, 1),
        "tokens": [s["tokens"] for s in samples],
    }


async def wave(
    url: str, model: str, name: str, prompts: list[str], eos: int, max_tokens: int
) -> list[dict[str, float]]:
    """Every prompt at once; each request's first-token and last-token times (from the
    wave's start) and its tokens."""
    limits = httpx.Limits(max_connections=len(prompts) + 2)
    async with httpx.AsyncClient(timeout=1800, limits=limits) as client:
        began = time.perf_counter()

        async def one(prompt: str) -> dict[str, float]:
            body: dict[str, Any] = {
                "model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                "temperature": 0.0, "stream_options": {"include_usage": True},
            }  # fmt: skip
            if not name.startswith("rapid-mlx"):  # it refuses logit_bias (module docstring)
                body["logit_bias"] = {str(eos): -100.0}
            sent = time.perf_counter() - began
            s = await stream_chat(client, url, body, "/v1/completions")
            first = sent + s.ttft
            return {"first": first, "end": first + sum(s.gaps), "tokens": s.tokens}

        return list(await asyncio.gather(*(one(p) for p in prompts)))


def decode_rate(samples: list[dict[str, float]]) -> float | None:
    """Tokens after each request's first, over the union of the requests' decode intervals."""
    spans = sorted((s["first"], s["end"]) for s in samples)
    covered, reach = 0.0, float("-inf")
    for start, end in spans:
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    tokens = sum(max(int(s["tokens"]) - 1, 0) for s in samples)
    return round(tokens / covered, 1) if covered > 0 else None


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants (0 once it has gone)."""
    total = 0
    for p in [pid, *_descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def _descendants(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    found = [int(c) for c in children]
    for c in list(found):
        found += _descendants(c)
    return found


class PeakRss(threading.Thread):
    """Samples a process tree's resident bytes until `finish`, which returns the peak."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self._done = pid, 0, threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            self._done.wait(0.1)

    def finish(self) -> int:
        self._done.set()
        self.join()
        return max(self.peak, tree_rss(self.pid))
