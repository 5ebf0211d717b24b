"""Concurrent streams against sequential ones on one `mlxd serve`: N streaming chat requests
(max_tokens each, EOS ignored) sent one after another, then all at once. Continuous batching
should make the concurrent wave take well under the sequential time; this prints the figures
(it used to be a timed assertion in the server tests, `t_conc < 0.8 * t_seq`).

    python -m benchmarks.concurrency_bench [--model DIR] [--clients 8] [--max-tokens 48]
                                           [--rounds 3]

Without --model a tiny random checkpoint (tests/checkpoints.py) is built in a temp dir. Prints
one JSON object: per round the sequential and concurrent wall seconds, and their medians.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import emit, free_port, isolated_env, mlxd_serve, running


def one_stream(client, max_tokens: int, i: int) -> int:  # type: ignore[no-untyped-def]
    """One streamed request; its completion token count."""
    stream = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": f"Tell me story number {i}."}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    return [c for c in stream][-1].usage.completion_tokens


def one_round(client, clients: int, max_tokens: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    sequential = [one_stream(client, max_tokens, i) for i in range(clients)]
    t_seq = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        concurrent = list(pool.map(lambda i: one_stream(client, max_tokens, i), range(clients)))
    t_conc = time.perf_counter() - t0
    if sequential != concurrent or set(sequential) != {max_tokens}:
        raise SystemExit(f"unexpected token counts: {sequential} / {concurrent}")
    return {"sequential_s": round(t_seq, 3), "concurrent_s": round(t_conc, 3),
            "ratio": round(t_conc / t_seq, 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="checkpoint dir (default: a tiny one)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import openai

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from tests.checkpoints import make_checkpoint

            model = make_checkpoint(Path(tmp) / "tiny-chat", "chat")
        port = free_port()
        cmd = mlxd_serve(model, port, "--max-batch", str(max(args.clients, 1)))
        with running(cmd, port, isolated_env(Path(tmp))) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0,
                                   timeout=600)  # fmt: skip
            one_stream(client, args.max_tokens, -1)  # warm-up
            rounds = [one_round(client, args.clients, args.max_tokens) for _ in range(args.rounds)]
    median = {k: round(statistics.median(r[k] for r in rounds), 3) for k in rounds[0]}
    emit({"model": str(args.model or "tiny-chat"), "clients": args.clients,
          "max_tokens": args.max_tokens, "rounds": rounds, "median": median})  # fmt: skip


if __name__ == "__main__":
    main()
