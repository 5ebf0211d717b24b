"""Images and text together: `mlxd serve` against mlx-vlm's own server on the same tiny vision
checkpoint of --family: llava (tests/vision_checkpoints.py: CLIP tower, llama text model) or
an M-RoPE family, qwen2_5_vl / qwen2_vl / qwen3_vl (tests/mrope_checkpoints.py), or gemma3 /
idefics3 / llava_next / mistral3 / pixtral / smolvlm (tests/vision_families.py, tiny only).

Closed loop: --clients streaming clients (8), half sending image turns (a distinct PNG per
request, as a data: URL) and half text turns (distinct prompts), each --per-client requests
one after another, greedy, EOS suppressed with logit_bias so every answer is --max-tokens
long. Per server: aggregate completion tokens/s, time to first token (p50/p99) of image and
text turns, and failed requests; --rounds alternates the server order. After its first round
each server answers every request of it again alone, one at a time: `differ_from_alone` counts
the answers that changed. JSON on stdout.

mlx-vlm 0.7.10's llava processor passes the tokenizer's `padding` to the image processor,
which transformers 5.24 refuses (every image request fails in mlx-vlm's own server and its
generate CLI); the peer runs with a shim that drops those keyword arguments for the image
processor only (`--no-shim` measures it as shipped).

    python -m benchmarks.vision_bench                              # 8 clients, 2 rounds
    python -m benchmarks.vision_bench --max-tokens 64 --per-client 4 --size small
    python -m benchmarks.vision_bench --family qwen2_5_vl
    python -m benchmarks.vision_bench --family gemma3
    python -m benchmarks.vision_bench --family llava_next
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.common import (
    PY,
    Sample,
    emit,
    eos_id,
    free_port,
    mlxd_serve,
    pct,
    progress,
    running,
    stream_chat,
)

# Runs mlx-vlm's server with its llava processor's text keyword arguments kept away from the
# image processor (see the module docstring).
PEER_SHIM = """
import runpy, sys
from mlx_vlm.models.llava import processing_llava

_call = processing_llava.LlavaProcessor.__call__

def _images_only(image_processor):
    def call(images, **kwargs):
        return image_processor(images)
    return call

def __call__(self, images=None, text=None, **kwargs):
    real = self.image_processor
    self.image_processor = _images_only(real)
    try:
        return _call(self, images=images, text=text, **kwargs)
    finally:
        self.image_processor = real

processing_llava.LlavaProcessor.__call__ = __call__
sys.argv[0] = "mlx_vlm.server"
runpy.run_module("mlx_vlm.server", run_name="__main__", alter_sys=True)
"""


MROPE = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl")
OTHERS = (
    "gemma3",
    "idefics3",
    "llava_next",  # anyres: a base image and a grid of tiles per picture
    "mistral3",
    "pixtral",
    "smolvlm",
)  # tests/vision_families.py, tiny only
FAMILIES = ("llava", *MROPE, *OTHERS)  # the shim is llava's alone


def make_checkpoint(family: str, root: Path, size: str) -> Path:
    """The tiny random checkpoint of `family` the tests build, in `root`."""
    if family == "llava":
        from tests.vision_checkpoints import make_vision_checkpoint

        return make_vision_checkpoint(root / "tiny-vision", size=size)
    if family in OTHERS:
        from tests.vision_families import make_family_checkpoint

        return make_family_checkpoint(family, root / f"tiny-{family}")
    from tests.mrope_checkpoints import make_mrope_checkpoint

    return make_mrope_checkpoint(root / f"tiny-{family}", family, size=size)


def server_command(kind: str, model: Path, port: int, shim: bool) -> list[str]:
    if kind == "mlxd":
        return mlxd_serve(model, port)
    head = [PY, "-c", PEER_SHIM] if shim else [PY, "-m", "mlx_vlm.server"]
    return [*head, "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]


def body_for(client: int, n: int, image: bool, args: argparse.Namespace, eos: int) -> dict:
    from tests.vision_checkpoints import png_bytes

    if image:
        url = "data:image/png;base64," + base64.b64encode(png_bytes(1000 * client + n)).decode()
        content: object = [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": f"Describe picture {n} for client {client}."},
        ]
    else:
        content = f"Client {client} request {n}: the quick brown fox jumps over the lazy dog."
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": args.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "logit_bias": {str(eos): -100.0},
    }


async def run_load(
    url: str, model: str, args: argparse.Namespace, eos: int, answers: dict | None = None
) -> dict:
    """One closed-loop load; `answers`, when given, gets each request's text by (client, n)."""
    limits = httpx.Limits(max_connections=args.clients + 4)
    images: list[Sample] = []
    texts: list[Sample] = []
    failed = 0
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:

        async def worker(cid: int) -> None:
            nonlocal failed
            image = cid < args.clients // 2
            for n in range(args.per_client):
                body = dict(body_for(cid, n, image, args, eos), model=model)
                try:
                    sample = await stream_chat(client, url, body)
                except httpx.HTTPError:
                    failed += 1
                    continue
                (images if image else texts).append(sample)
                if answers is not None:
                    answers[cid, n] = sample.text

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in range(args.clients)))
        wall = time.perf_counter() - t0
    tokens = sum(s.tokens for s in images + texts)
    ttft = sorted(s.ttft for s in images + texts)
    return {
        "requests": len(images) + len(texts),
        "failed_requests": failed,
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "agg_tok_s": round(tokens / wall, 1) if wall else 0.0,
        "ttft_p50_ms": round(1000 * pct(ttft, 50), 1),
        "ttft_p99_ms": round(1000 * pct(ttft, 99), 1),
        "image_ttft_p99_ms": round(1000 * pct(sorted(s.ttft for s in images), 99), 1),
        "text_ttft_p99_ms": round(1000 * pct(sorted(s.ttft for s in texts), 99), 1),
    }


async def differ_from_alone(
    url: str, model: str, args: argparse.Namespace, eos: int, answers: dict
) -> int:
    """How many of the load's answers change when their request runs alone."""
    differ = 0
    async with httpx.AsyncClient(timeout=900) as client:
        for (cid, n), text in sorted(answers.items()):
            body = dict(body_for(cid, n, cid < args.clients // 2, args, eos), model=model)
            differ += (await stream_chat(client, url, body)).text != text
    return differ


def bench(kind: str, model_dir: Path, args: argparse.Namespace, eos: int, check: bool) -> dict:
    port = free_port()
    cmd = server_command(kind, model_dir, port, args.family == "llava" and not args.no_shim)
    model = "default" if kind == "mlxd" else str(model_dir)
    with running(cmd, port, dict(os.environ, HF_HUB_OFFLINE="1")) as url:
        warm = argparse.Namespace(**{**vars(args), "clients": 2, "per_client": 1})
        asyncio.run(run_load(url, model, warm, eos))  # warm-up: one image and one text turn
        answers: dict = {}
        result = asyncio.run(run_load(url, model, args, eos, answers))
        if check:
            result["differ_from_alone"] = asyncio.run(
                differ_from_alone(url, model, args, eos, answers)
            )
        progress(kind, result)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--per-client", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", default="tiny", choices=["tiny", "small", "big"])
    parser.add_argument("--no-shim", action="store_true", help="run mlx-vlm's server as shipped")
    parser.add_argument("--family", default="llava", choices=sorted(FAMILIES))
    parser.add_argument("--servers", default="mlxd,mlx_vlm", help="comma-separated")
    args = parser.parse_args()
    kinds = [k for k in ("mlxd", "mlx_vlm") if k in args.servers.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_checkpoint(args.family, Path(tmp), args.size)
        eos = eos_id(model_dir)
        runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
        for r in range(args.rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                runs[kind].append(bench(kind, model_dir, args, eos, check=r == 0))
    keys = ("agg_tok_s", "ttft_p99_ms", "image_ttft_p99_ms", "text_ttft_p99_ms")
    summary = {
        key: round(
            statistics.median(m[key] for m in runs["mlxd"])
            / max(statistics.median(v[key] for v in runs["mlx_vlm"]), 1e-9),
            3,
        )
        for key in (keys if len(kinds) == 2 else ())
    }
    source = {"llava": "vision_checkpoints.py", **dict.fromkeys(OTHERS, "vision_families.py")}
    source = source.get(args.family, "mrope_checkpoints.py")
    out = {
        "benchmark": "vision_bench",
        "family": args.family,
        "checkpoint": f"tests/{source} {args.family}, text size {args.size}",
        "clients": args.clients,
        "image_clients": args.clients // 2,
        "per_client": args.per_client,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "peer": "mlx_vlm.server 0.7.10"
        + ("" if args.no_shim or args.family != "llava" else " (llava processor shim)"),
        "runs": runs,
        "mlxd_over_mlx_vlm_median": summary,
    }
    emit(out)


if __name__ == "__main__":
    main()
