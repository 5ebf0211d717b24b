"""Embeddings throughput and their cost to chat decoding, in-process on the real engine.

  python -m benchmarks.embeddings_bench [--size small] [--seconds 6] [--clients 1,8,32]
                                        [--chats 8] [--tokens 48] [--sections throughput,itl]

Sections:
  throughput  inputs/s of `--clients` closed-loop clients (threads calling
              chat.embedding.start_embedding, one input per request, as the server's handlers
              do) on a tiny encoder (BERT, mlx-embeddings' class) and a tiny decoder (Qwen3,
              mlx-lm's class), against the same model run directly through its library in a
              loop, one input per call (`direct_loop`) and 32 per call (`direct_batch32`)
  itl         `--chats` greedy streaming chats on a tiny llama (tests/checkpoints.py), their
              inter-token gaps (p50, p99) and decode tok/s alone and with two clients sending
              32-input embedding requests to the encoder meanwhile; `same_output` says the
              chats' tokens did not change
Checkpoints are random-weight and generated (tests/embedding_checkpoints.py, size `small`:
128 hidden, 2 layers); inputs are ~20-token sentences.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import emit, fast_blas, pct, progress, scratch

fast_blas()  # before mlx is imported

import mlx.core as mx  # noqa: E402
from tests.checkpoints import make_checkpoint  # noqa: E402
from tests.embedding_checkpoints import make_decoder, make_encoder  # noqa: E402

from mlxd.chat.embedding import EmbedInput, start_embedding  # noqa: E402
from mlxd.engine import EmbedRequest, Engine, EngineConfig, EngineRequest, ModelInfo  # noqa: E402
from mlxd.types import SamplingParams  # noqa: E402

SENTENCES = [
    f"sentence {i}: the quick brown fox jumps over the lazy dog near Paris" for i in range(64)
]


def clients_rate(engine: Engine, info: ModelInfo, clients: int, seconds: float) -> float:
    """Inputs/s of `clients` threads, each sending one-input requests until time is up."""
    stop = time.monotonic() + seconds
    counts = [0] * clients

    def client(k: int) -> None:
        i = k
        while time.monotonic() < stop:
            start_embedding(engine, info, EmbedInput([SENTENCES[i % 64]])).result(120)
            counts[k] += 1
            i += clients

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - began)


def direct_rates(path: Path, encoder: bool, seconds: float) -> dict[str, float]:
    """The model through its own library, in a loop: one input per call, then 32 per call."""
    rows = _token_rows(path)
    if encoder:
        from mlx_embeddings.utils import load_model

        model = load_model(path)

        def run(batch: list[list[int]]) -> None:
            width = max(len(r) for r in batch)
            ids = mx.array([r + [0] * (width - len(r)) for r in batch])
            mask = mx.array([[1] * len(r) + [0] * (width - len(r)) for r in batch])
            mx.eval(model(ids, attention_mask=mask).text_embeds)
    else:
        from mlx_lm import load

        lm, _ = load(str(path))

        def run(batch: list[list[int]]) -> None:
            width = max(len(r) for r in batch)
            ids = mx.array([r + [0] * (width - len(r)) for r in batch])
            hidden = lm.model(ids)
            mx.eval(hidden[mx.arange(len(batch)), mx.array([len(r) - 1 for r in batch])])

    out = {}
    for label, size in (("direct_loop", 1), ("direct_batch32", 32)):
        done, began, i = 0, time.monotonic(), 0
        while time.monotonic() - began < seconds:
            run([rows[(i + j) % 64] for j in range(size)])
            done, i = done + size, i + size
        out[label] = done / (time.monotonic() - began)
    return out


def _token_rows(path: Path) -> list[list[int]]:
    from mlxd.backend.mlx_lm.compat import load_tokenizer

    tokenizer = load_tokenizer(path)
    return [tokenizer.encode(s) for s in SENTENCES]


def throughput(
    models: dict[str, tuple[Path, bool]], clients: list[int], seconds: float
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, (path, encoder) in models.items():
        row: dict[str, Any] = {}
        with Engine(EngineConfig.from_settings(max_batch=8)) as engine:
            info = engine.load_model(path)
            for n in clients:
                row[f"mlxd_{n}_clients"] = round(clients_rate(engine, info, n, seconds), 1)
                progress(f"{label} {n} clients", row[f"mlxd_{n}_clients"])
        row.update({k: round(v, 1) for k, v in direct_rates(path, encoder, seconds).items()})
        progress(f"{label} direct", row)
        out[label] = row
    return out


def chats_run(
    engine: Engine, chat: str, chats: int, tokens: int
) -> tuple[list[list[int]], list[float], float]:
    """`chats` greedy streams at once: their tokens, every inter-token gap, total tok/s."""
    info = engine.load_model(Path(chat))
    prompts = [info.tokenizer.encode(f"question {i}: what is {i} plus {i}?") for i in range(chats)]
    params = SamplingParams(max_tokens=tokens, ignore_eos=True)
    outputs: list[list[int]] = [[] for _ in range(chats)]
    gaps: list[float] = []
    lock = threading.Lock()

    def stream(k: int) -> None:
        handle = engine.submit(EngineRequest(info.name, prompts[k], params))
        last = None
        for event in handle:
            now = time.perf_counter()
            ids = getattr(event, "token_ids", None)
            if ids is None:
                continue
            outputs[k].extend(ids)
            if last is not None:
                with lock:
                    gaps.append((now - last) / len(ids))
            last = now

    began = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(k,)) for k in range(chats)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outputs, gaps, sum(map(len, outputs)) / (time.perf_counter() - began)


def itl(chat: Path, encoder: Path, chats: int, tokens: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    config = EngineConfig.from_settings(max_batch=chats, stream_interval_s=0.0)
    with Engine(config) as engine:
        enc = engine.load_model(encoder)
        rows = _token_rows(encoder)[:32]
        chats_run(engine, str(chat), chats, 4)  # warm-up
        alone, gaps, rate = chats_run(engine, str(chat), chats, tokens)
        out["alone"] = _gap_stats(gaps, rate)
        stop, served = threading.Event(), [0]

        def load() -> None:
            while not stop.is_set():
                engine.embed(EmbedRequest(enc.name, rows)).result(120)
                served[0] += 32

        loaders = [threading.Thread(target=load) for _ in range(2)]
        for t in loaders:
            t.start()
        began = time.perf_counter()
        beside, gaps, rate = chats_run(engine, str(chat), chats, tokens)
        stop.set()
        for t in loaders:
            t.join()
        out["with_embeddings"] = _gap_stats(gaps, rate)
        out["with_embeddings"]["embedded_inputs_per_s"] = round(
            served[0] / (time.perf_counter() - began), 1
        )
        out["same_output"] = beside == alone
    out["p99_ratio"] = round(
        out["with_embeddings"]["itl_p99_ms"] / max(out["alone"]["itl_p99_ms"], 1e-9), 2
    )
    return out


def _gap_stats(gaps: list[float], rate: float) -> dict[str, Any]:
    ordered = sorted(gaps)
    return {
        "itl_p50_ms": round(pct(ordered, 50) * 1000, 2),
        "itl_p99_ms": round(pct(ordered, 99) * 1000, 2),
        "decode_tok_s": round(rate, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size", default="small", choices=["tiny", "small"])
    parser.add_argument("--seconds", type=float, default=6.0, help="per measurement")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--chats", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--sections", default="throughput,itl")
    args = parser.parse_args()
    work = scratch("embeddings_bench")
    encoder = make_encoder(work / "encoder", size=args.size)
    decoder = make_decoder(work / "decoder", size=args.size)
    sections = args.sections.split(",")
    report: dict[str, Any] = {"blas": fast_blas(), "size": args.size, "seconds": args.seconds}
    if "throughput" in sections:
        clients = [int(c) for c in args.clients.split(",")]
        models = {"encoder": (encoder, True), "decoder": (decoder, False)}
        report["throughput_inputs_per_s"] = throughput(models, clients, args.seconds)
    if "itl" in sections:
        chat = make_checkpoint(work / "chat", "small")
        report["chat_itl"] = itl(chat, encoder, args.chats, args.tokens)
    emit(report)


if __name__ == "__main__":
    main()
