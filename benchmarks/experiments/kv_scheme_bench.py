"""Is quantized KV's greedy agreement mlxd's batch cache or the scheme itself? (issue 30); JSON.

    python -m benchmarks.experiments.kv_scheme_bench --model ~/.mlxd/models/smollm2-135m-instruct
    python -m benchmarks.experiments.kv_scheme_bench --kind tiny --settings 8/32 --prompts 2 \
        --tokens 4 --context 64 --decode 4 --rounds 1   # smallest run

kv_memory_bench's quality prompts (its QUESTIONS through the model's chat template, the same
token ids everywhere), greedy, --tokens tokens each, EOS ignored, through:
- mlx-lm's one-sequence `generate_step`: full precision; `kv_bits`, `kv_group_size` and
  `quantized_kv_start=0` (`mlx_lm`: mlx-lm prefills the prompt in full precision, then
  quantizes the cache, so only the answer's attention reads quantized keys); and the same
  cache quantized from the first prompt token (`mlx_lm_quantized_prompt`: a `prompt_cache` of
  `QuantizedKVCache`s, so the prompt's own attention reads quantized keys and values too);
- mlxd's engine in process, every prompt in one batch, at full precision and each setting.
Per path and setting: agreement with that path's own full precision (kv_memory_bench's
measure: tokens agreed from the start), and one sequence's decode tokens/s after a
--context-token prompt over its full precision's (median of --rounds, settings alternating).
`mlxd_full_vs_mlx_lm_full` checks that both full-precision paths answer alike.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import emit, fast_blas, progress
from benchmarks.kv_memory_bench import QUESTIONS, agreement, chat_ids, collected, generated

Setting = tuple[int, int]  # (bits, group size); (0, 0) is full precision
FULL: Setting = (0, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="a checkpoint directory (default: generated)")
    ap.add_argument("--kind", default="medium", help="generated checkpoint size without --model")
    ap.add_argument("--settings", default="8/64,8/32", help="BITS/GROUP settings to compare")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt")
    ap.add_argument("--context", type=int, default=512, help="decode-rate prompt tokens")
    ap.add_argument("--decode", type=int, default=64, help="decode-rate tokens")
    ap.add_argument("--rounds", type=int, default=2, help="decode-rate rounds")
    args = ap.parse_args()
    fast_blas()
    model = args.model or generated(args.kind)
    settings = [FULL] + [_setting(s) for s in args.settings.split(",") if s]
    ids, vocab, mlxd = mlxd_runs(model, settings, args)
    lm = mlx_lm_runs(model, settings, ids, vocab, args)
    emit(report(args, model, settings, mlxd, lm))


def _setting(text: str) -> Setting:
    bits, _, group = text.partition("/")
    return int(bits), int(group or 64)


def _name(setting: Setting) -> str:
    return "full" if setting == FULL else f"{setting[0]}/{setting[1]}"


def mlxd_runs(
    model: Path, settings: list[Setting], args: argparse.Namespace
) -> tuple[list[list[int]], int, dict[str, Any]]:
    """The prompts' token ids, the vocabulary size, and per setting mlxd's greedy answers
    and decode rates."""
    from mlxd.engine import Engine, EngineConfig

    out: dict[str, Any] = {_name(s): {"decode": []} for s in settings}
    ids: list[list[int]] = []
    vocab = 0
    for round_ in range(args.rounds):
        for setting in settings if round_ % 2 == 0 else settings[::-1]:
            progress("mlxd", f"round {round_ + 1}, {_name(setting)}")
            config = EngineConfig.from_settings(
                max_batch=max(8, args.prompts), kv_bits=setting[0],
                kv_group_size=setting[1] or 64, prefix_cache_bytes=0, stream_interval_s=0.0,
                kv_budget_bytes=1 << 40, watchdog_seconds=3600.0,
            )  # fmt: skip
            engine = Engine(config)
            try:
                info = engine.load_model(model)
                entry, vocab = out[_name(setting)], info.vocab_size
                if round_ == 0:
                    ids = [chat_ids(info, [{"role": "user", "content": q}]) for q in _asked(args)]
                    entry["answers"] = mlxd_answers(engine, info.name, ids, args.tokens)
                context = min(args.context, info.context_window - args.decode - 1)
                entry["decode"].append(mlxd_decode(engine, info, context, args.decode))
            finally:
                engine.close()
    return ids, vocab, out


def _asked(args: argparse.Namespace) -> list[str]:
    return (QUESTIONS * 4)[: args.prompts]


def mlxd_answers(engine: Any, name: str, ids: list[list[int]], n: int) -> list[dict[str, Any]]:
    """Greedy tokens and their logprobs, every prompt submitted at once (one batch)."""
    from mlxd.engine import EngineRequest
    from mlxd.types import SamplingParams

    params = SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0, logprobs=True)
    handles = [engine.submit(EngineRequest(name, p, params)) for p in ids]
    return collected(handles)


def mlxd_decode(engine: Any, info: Any, context: int, n: int) -> float:
    """One request's decode tokens/s after a `context`-token prompt."""
    from mlxd.engine import EngineRequest
    from mlxd.types import SamplingParams

    prompt = _random_prompt(info.vocab_size, context)
    params = SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0)
    timings = engine.submit(EngineRequest(info.name, prompt, params)).collect()[1].timings
    return (n - 1) / (timings.total_s - timings.ttft_s)


def _random_prompt(vocab: int, n: int) -> list[int]:
    rng = random.Random(0)
    return [rng.randrange(10, vocab - 10) for _ in range(n)]


def mlx_lm_runs(
    model: Path,
    settings: list[Setting],
    ids: list[list[int]],
    vocab: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Per setting mlx-lm's one-sequence answers (both prompt modes) and decode rates."""
    import mlx_lm

    lm = mlx_lm.load(str(model))[0]
    out: dict[str, Any] = {}
    for setting in settings:
        progress("mlx_lm answers", _name(setting))
        entry: dict[str, Any] = {"answers": [_lm_answer(lm, p, setting, False, args) for p in ids]}
        if setting != FULL:
            entry["quantized_prompt"] = [_lm_answer(lm, p, setting, True, args) for p in ids]
        entry["decode"] = []
        out[_name(setting)] = entry
    context = min(args.context, 2048)  # mlx-lm prefills it in one step before quantizing
    for round_ in range(args.rounds):
        for setting in settings if round_ % 2 == 0 else settings[::-1]:
            rate = _lm_decode(lm, _random_prompt(vocab, context), setting, args.decode)
            out[_name(setting)]["decode"].append(rate)
    return out


def _lm_kwargs(lm: Any, setting: Setting, quantized_prompt: bool) -> dict[str, Any]:
    from mlx_lm.models.cache import QuantizedKVCache

    if setting == FULL:
        return {}
    bits, group = setting
    if quantized_prompt:
        cache = [QuantizedKVCache(group_size=group, bits=bits) for _ in lm.layers]
        return {"prompt_cache": cache}
    return {"kv_bits": bits, "kv_group_size": group, "quantized_kv_start": 0}


def _lm_answer(
    lm: Any, prompt: list[int], setting: Setting, quantized_prompt: bool, args: argparse.Namespace
) -> dict[str, Any]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    tokens, logprobs = [], []
    kwargs = _lm_kwargs(lm, setting, quantized_prompt)
    for token, lps in generate_step(mx.array(prompt), lm, max_tokens=args.tokens, **kwargs):
        tokens.append(int(token))
        logprobs.append(float(lps[int(token)].item()))
    return {"tokens": tokens, "logprobs": logprobs}


def _lm_decode(lm: Any, prompt: list[int], setting: Setting, n: int) -> float:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    first = 0.0
    steps = generate_step(mx.array(prompt), lm, max_tokens=n, **_lm_kwargs(lm, setting, False))
    for i, _ in enumerate(steps):
        if i == 0:
            first = time.perf_counter()
    return (n - 1) / (time.perf_counter() - first)


def report(
    args: argparse.Namespace,
    model: Path,
    settings: list[Setting],
    mlxd: dict[str, Any],
    lm: dict[str, Any],
) -> dict[str, Any]:
    n = args.tokens
    out: dict[str, Any] = {
        "bench": "kv_scheme_bench",
        "command": "python -m benchmarks.experiments.kv_scheme_bench " + " ".join(sys.argv[1:]),
        "model": str(model),
        "mlxd_full_vs_mlx_lm_full": agreement(lm["full"]["answers"], mlxd["full"]["answers"], n),
        "decode_tokens_per_s": {
            path: {k: [round(r, 1) for r in v["decode"]] for k, v in runs.items()}
            for path, runs in (("mlxd", mlxd), ("mlx_lm", lm))
        },
        "settings": {},
    }
    for setting in settings[1:]:
        name = _name(setting)
        out["settings"][name] = {
            "mlx_lm": _versus(lm, name, "answers", n),
            "mlx_lm_quantized_prompt": _versus(lm, name, "quantized_prompt", n),
            "mlxd": _versus(mlxd, name, "answers", n),
        }
    return out


def _versus(runs: dict[str, Any], name: str, key: str, n: int) -> dict[str, Any]:
    """One path's setting against its own full precision: agreement, decode rate ratio."""
    entry = agreement(runs["full"]["answers"], runs[name][key], n)
    if key == "answers":
        full = statistics.median(runs["full"]["decode"])
        entry["decode_vs_full"] = round(statistics.median(runs[name]["decode"]) / full, 3)
    return entry


if __name__ == "__main__":
    main()
