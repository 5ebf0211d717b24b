"""Quantized KV (`--kv-bits`, `--kv-quant-start`) against full precision, in process, one
engine per setting (`--bits 0,8,4,4@32,8k16`: BITS@N keeps the last N positions exact,
BITSkK stores keys at K bits, 16: float16, `--kv-key-bits`): KV
bytes per context token, peak RSS at --conversations conversations of --context tokens (they
share all but their last 64 prompt tokens, prefilled once: each row still holds its own KV),
how many such conversations fit a fixed KV budget, decode tokens/s at that batch, and greedy
quality against full precision (agreement over the first --quality-tokens tokens and the
mean |logprob| difference of the chosen tokens, --quality-prompts chat prompts answered in
one batch; that free-running agreement is the headline, and `quality.teacher_forced` a
second figure: per step, the setting's top-1 token given full precision's own prefix);
`--long N` adds the step times of 4 decoding rows while an N-token prompt
prefills (long_prompt_bench measures that against the peers). `--peers` runs real servers
side by side under the same 8 x 4k load (benchmarks/kv_peers.py); JSON.

Each setting runs in its own child process (peak RSS is the child's `ru_maxrss`). Use the
demo model for quality (`--model DIR`: an imported checkpoint); without --model a generated
`medium` checkpoint runs (random weights: its quality figures mean little).

    python -m benchmarks.kv_memory_bench --model ~/.mlxd/models/smollm2-135m-instruct \
        --peers mlxd,vllm-mlx,rapid-mlx,mlx_lm
    python -m benchmarks.kv_memory_bench --kind tiny --context 64 --conversations 2 \
        --quality-prompts 2 --quality-tokens 4 --long 256 --decode-tokens 4   # smallest run
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import emit, fast_blas, pct, progress
from benchmarks.kv_peers import decode_rate, run_peers

OWN = 64  # tokens of each conversation's prompt that no other shares

QUESTIONS = [
    "What is the capital of France?", "Explain photosynthesis in two sentences.",
    "Write a haiku about the sea.", "How do I reverse a list in Python?",
    "Name three primary colors.", "What causes the seasons on Earth?",
    "Give me a recipe for pancakes.", "Who wrote Hamlet?", "What is 17 times 23?",
    "Describe a cat to someone who has never seen one.", "What is machine learning?",
    "Translate 'good morning' into Spanish.", "Why is the sky blue?",
    "List the planets of the solar system.", "How does a bicycle stay upright?",
    "What is the boiling point of water?", "Summarize the plot of Cinderella.",
    "Write a limerick about a programmer.", "What are the benefits of exercise?",
    "How do vaccines work?",
]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="a checkpoint directory (default: generated)")
    ap.add_argument("--kind", default="medium", help="generated checkpoint size without --model")
    ap.add_argument(
        "--bits",
        default="0,8,4,4@32",
        help="settings to compare: BITS, BITS@N (--kv-quant-start N), BITSkK (--kv-key-bits K) "
        "or BITSkK@N; 0 is full precision",
    )
    ap.add_argument("--kv-group-size", type=int, default=64)
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--context", type=int, default=4096, help="prompt tokens per conversation")
    ap.add_argument("--decode-tokens", type=int, default=16)
    ap.add_argument("--budget-bytes", type=int, default=1 << 30, help="the fixed KV budget")
    ap.add_argument("--quality-prompts", type=int, default=20)
    ap.add_argument("--quality-tokens", type=int, default=64)
    ap.add_argument(
        "--long", type=int, default=0, help="a long prompt's tokens beside 4 decoding rows "
        "(0: skipped; long_prompt_bench measures long prompts against the peers)",
    )  # fmt: skip
    ap.add_argument(
        "--peers", default="", help="servers side by side under the same load (benchmarks/"
        "kv_peers.py): mlxd, vllm-mlx, rapid-mlx, mlx_lm at --peer-bits, NAME-0 unquantized",
    )  # fmt: skip
    ap.add_argument("--peer-bits", type=int, default=8, choices=(8, 4))
    ap.add_argument("--vllm-mlx", default="/work/peers/vllm-mlx/bin/vllm-mlx")
    ap.add_argument("--rapid-mlx", default="/work/peers/rapid-mlx/bin/rapid-mlx")
    ap.add_argument("--mlx-lm-python", default=sys.executable, help="runs mlx_lm.server")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child: one setting
    ap.add_argument("--teacher", type=Path, help=argparse.SUPPRESS)  # child: full's answers
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(run_setting(args, args.one)))
        return
    model = args.model or generated(args.kind)
    settings: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kv-teacher-") as scratch:
        teacher = Path(scratch) / "full.json"
        for setting in filter(None, args.bits.split(",")):
            progress("kv setting", setting)
            forced = teacher if "0" in settings and parse_setting(setting)[0] else None
            settings[setting] = child(args, model, setting, forced)
            if setting == "0":
                teacher.write_text(json.dumps(settings["0"]["quality"]))
    out = report(args, model, settings)
    if args.peers:
        out["servers"] = run_peers(args, model)
    emit(out)


def parse_setting(setting: str) -> tuple[int, int, int]:
    """ "8@256" -> (8 bits, quant start 256, key bits 0); "8k16" -> (8, 0, 16); "8" -> (8, 0, 0)."""
    head, _, start = setting.partition("@")
    bits, _, key_bits = head.partition("k")
    return int(bits), int(start or 0), int(key_bits or 0)


def generated(kind: str) -> Path:
    from tests.checkpoints import make_checkpoint

    root = Path(tempfile.mkdtemp(prefix="kv-bench-"))
    head_dim = 32 if kind == "tiny" else None  # quantization groups need 32 or more
    return make_checkpoint(root / kind, "chat", size=kind, head_dim=head_dim)


def child(
    args: argparse.Namespace, model: Path, setting: str, teacher: Path | None
) -> dict[str, Any]:
    argv, rest = [], iter(sys.argv[1:])
    for a in rest:
        if a == "--model":
            next(rest, None)  # and its value: the child gets the resolved one
        elif not a.startswith("--model="):
            argv.append(a)
    cmd = [sys.executable, "-m", "benchmarks.kv_memory_bench", *argv, "--model", str(model)]
    if teacher is not None:
        cmd += ["--teacher", str(teacher)]
    done = subprocess.run([*cmd, "--one", setting], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run_setting(args: argparse.Namespace, setting: str) -> dict[str, Any]:
    """One child: every measurement of one --kv-bits (@ --kv-quant-start) setting."""
    fast_blas()
    bits, start, key_bits = parse_setting(setting)
    from mlxd.engine import Engine, EngineConfig

    steps: list[tuple[float, bool]] = []  # each engine step's start, and whether it was
    long_prefilling = threading.Event()  # while the long prompt waited or prefilled

    def on_step(site: str, _request: str | None) -> None:
        if site == "step":
            steps.append((time.perf_counter(), long_prefilling.is_set()))

    config = EngineConfig.from_settings(
        max_batch=max(8, args.conversations, args.quality_prompts), kv_bits=bits,
        kv_group_size=args.kv_group_size, kv_quant_start=start, kv_key_bits=key_bits,
        prefix_cache_bytes=4 << 30,
        stream_interval_s=0.0, kv_budget_bytes=1 << 40, fault_hook=on_step,
        watchdog_seconds=3600.0,  # one 8-row prefill step can take minutes on a loaded CPU
    )  # fmt: skip
    engine = Engine(config)
    try:
        info = engine.load_model(args.model)
        # Within the model's window (a generated checkpoint has 2048 positions).
        args.context = min(args.context, info.context_window - args.decode_tokens - 1)
        args.long = min(args.long, info.context_window - 2)
        out: dict[str, Any] = {
            "kv_bits": bits,
            "kv_quant_start": start,
            "kv_key_bits": key_bits or bits,
            "context_tokens": args.context,
            "kv_bytes_per_token": info.kv.bytes_per_token,
            "kv_bytes_per_conversation": info.kv.bytes_for(args.context + args.decode_tokens),
        }
        seconds = {}
        for part, measure in (("conversations", conversations), ("quality", greedy_answers)):
            began = time.perf_counter()
            out[part] = measure(engine, info, args)
            seconds[part] = round(time.perf_counter() - began, 1)
        out.update(out.pop("conversations"))
        if args.long:
            began = time.perf_counter()
            out["long_prompt"] = long_prompt(engine, info, args, steps, long_prefilling)
            seconds["long_prompt"] = round(time.perf_counter() - began, 1)
    finally:
        engine.close()
    if args.teacher is not None:
        began = time.perf_counter()
        full = json.loads(args.teacher.read_text())
        out["teacher_forced"] = teacher_forced(args, (bits, start, key_bits), full)
        seconds["teacher_forced"] = round(time.perf_counter() - began, 1)
    out["seconds"] = seconds
    return out


def conversations(engine: Any, info: Any, args: argparse.Namespace) -> dict[str, Any]:
    """--conversations prompts of --context tokens at once: peak RSS and two decode rates.
    `batch_decode_tokens_per_s`: tokens/s while every row decodes (from the last row's first
    token to the first row's last; --decode-tokens must outlast the joins), the issue's
    "decode at batch 8"; `decode_tokens_per_s`: the servers' measure, which also counts
    steps taken while later rows join (their prefill over the others' KV). They share all
    but their last OWN tokens, prefilled once first (the prefix cache then
    copies it into each row: every row still holds its own --context tokens of KV, and the
    prefill costs one conversation, not all)."""
    from mlxd.engine import EngineRequest
    from mlxd.types import SamplingParams

    rng = random.Random(0)
    own = min(OWN, args.context // 2)
    shared = [rng.randrange(10, info.vocab_size - 10) for _ in range(args.context - own)]
    engine.submit(EngineRequest(info.name, [*shared, 5], SamplingParams(max_tokens=1))).collect()
    snapshot_bytes = engine.stats().cache.kv_bytes
    prompts = [
        shared + [rng.randrange(10, info.vocab_size - 10) for _ in range(own)]
        for _ in range(args.conversations)
    ]
    params = SamplingParams(max_tokens=args.decode_tokens, ignore_eos=True, temperature=0.0)
    handles = [engine.submit(EngineRequest(info.name, p, params)) for p in prompts]
    streams = [_Arrivals(h) for h in handles]  # all submitted at once, each read in a thread
    for stream in streams:
        stream.thread.join()
    timings = [s.finish.timings for s in streams]
    # The servers' measure (kv_peers.decode_rate): each row's tokens after its first over the
    # union of the rows' decode intervals. Rows start one after another, so the former
    # window (last first token to last finish) held only part of the tokens it counted.
    spans = [{"first": t.ttft_s, "end": t.total_s, "tokens": args.decode_tokens} for t in timings]
    return {
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "prefix_snapshot_bytes": snapshot_bytes,  # inside the peak: the shared prefix's copy
        "decode_tokens_per_s": decode_rate(spans),
        "batch_decode_tokens_per_s": batch_decode_rate([s.times for s in streams]),
        "first_tokens_s": [
            round(min(t.ttft_s for t in timings), 2),
            round(max(t.ttft_s for t in timings), 2),
        ],
    }


class _Arrivals:
    """One request's stream read in a thread: when each token event came, and its finish."""

    def __init__(self, handle: Any) -> None:
        self.times: list[tuple[float, int]] = []
        self.finish: Any = None
        self.thread = threading.Thread(target=self._read, args=(handle,), daemon=True)
        self.thread.start()

    def _read(self, handle: Any) -> None:
        for event in handle:
            tokens = getattr(event, "token_ids", None)
            if tokens is None:
                self.finish = event
            else:
                self.times.append((time.perf_counter(), len(tokens)))


def batch_decode_rate(rows: list[list[tuple[float, int]]]) -> float | None:
    """Tokens/s of the window in which every row decodes: after the last row's first token,
    up to the first row's last; None when the rows never all decode at once."""
    if not rows or not all(rows):
        return None
    start, end = max(r[0][0] for r in rows), min(r[-1][0] for r in rows)
    if end <= start:
        return None
    tokens = sum(n for r in rows for t, n in r if start < t <= end)
    return round(tokens / (end - start), 1)


def greedy_answers(engine: Any, info: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each chat prompt's greedy tokens and their logprobs, all prompts in one batch (greedy
    rows answer alone as in a batch: tests/integration/engine)."""
    from mlxd.engine import EngineRequest
    from mlxd.types import SamplingParams

    params = SamplingParams(
        max_tokens=args.quality_tokens, ignore_eos=True, temperature=0.0, logprobs=True
    )
    prompts = [
        chat_ids(info, [{"role": "user", "content": q}])
        for q in (QUESTIONS * 4)[: args.quality_prompts]
    ]
    handles = [engine.submit(EngineRequest(info.name, p, params)) for p in prompts]
    answers = collected(handles)
    for answer, prompt in zip(answers, prompts, strict=True):
        answer["prompt"] = prompt
    return answers


def teacher_forced(
    args: argparse.Namespace, setting: tuple[int, int, int], full: list[dict[str, Any]]
) -> list[list[bool]]:
    """Per prompt and answer position: whether this setting's top-1 token, given full
    precision's own prompt and answer so far, is full precision's. One forward pass over
    prompt + answer through the model's caches at this setting (`quantize_kv`: the engine's
    cache classes; each position is quantized once, as it is written, so one pass sees what
    step-by-step decoding would)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from mlxd.backend.kv.model_cache import quantize_kv
    from mlxd.backend.loader import load_checkpoint

    model = load_checkpoint(args.model).model
    bits, start, key_bits = setting
    quantize_kv(model, bits, args.kv_group_size, start, key_bits)
    out = []
    for answer in full:
        prompt, tokens = answer["prompt"], answer["tokens"][: args.quality_tokens]
        logits = model(mx.array([prompt + tokens[:-1]]), cache=make_prompt_cache(model))
        top = mx.argmax(logits[0, len(prompt) - 1 :], axis=-1).tolist()
        out.append([a == b for a, b in zip(top, tokens, strict=True)])
    return out


def collected(handles: list[Any]) -> list[dict[str, Any]]:
    """Each handle's streamed tokens and their logprobs, in the handles' order."""
    from mlxd.types import TokenEvent

    answers = []
    for handle in handles:
        tokens, logprobs = [], []
        for event in handle:
            if isinstance(event, TokenEvent):
                tokens.extend(event.token_ids)
                logprobs.extend(lp.logprob for lp in event.logprobs)
        answers.append({"tokens": tokens, "logprobs": logprobs})
    return answers


def chat_ids(info: Any, messages: list[dict[str, str]]) -> list[int]:
    tokenizer = info.tokenizer
    if getattr(tokenizer, "has_chat_template", False):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids)
    return list(tokenizer.encode(messages[0]["content"]))


def long_prompt(
    engine: Any,
    info: Any,
    args: argparse.Namespace,
    steps: list[tuple[float, bool]],
    prefilling: threading.Event,
) -> dict[str, Any]:
    """Step times of 4 decoding rows before a --long prompt and while it prefills."""
    from mlxd.engine import EngineRequest, RequestStatus
    from mlxd.types import SamplingParams

    rng = random.Random(1)
    rows = [
        engine.submit(EngineRequest(
            info.name, [rng.randrange(10, 400) for _ in range(16)],
            SamplingParams(max_tokens=100_000, ignore_eos=True, temperature=0.0),
        ))
        for _ in range(4)
    ]  # fmt: skip
    drain = [threading.Thread(target=lambda h=h: [None for _ in h], daemon=True) for h in rows]
    for t in drain:
        t.start()
    while not all(h.status is RequestStatus.DECODING for h in rows):
        time.sleep(0.01)
    steps.clear()
    time.sleep(0.5)  # decode alone for a while: the baseline steps
    long_ids = [rng.randrange(10, info.vocab_size - 10) for _ in range(args.long)]
    prefilling.set()
    handle = engine.submit(EngineRequest(info.name, long_ids, SamplingParams(max_tokens=1)))
    started = time.perf_counter()
    handle.collect()
    ttft = time.perf_counter() - started
    prefilling.clear()
    for h in rows:
        h.cancel()
    for t in drain:
        t.join(30)
    before = _gaps([s for s in steps if not s[1]], steps)
    during = _gaps([s for s in steps if s[1]], steps)
    return {
        "long_prompt_tokens": args.long,
        "long_ttft_s": round(ttft, 3),
        "itl_before_median_ms": _ms(statistics.median(before)) if before else None,
        "itl_during_median_ms": _ms(statistics.median(during)) if during else None,
        "itl_during_p99_ms": _ms(pct(during, 99)) if during else None,
        "steps_during": len(during),
    }


def _gaps(chosen: list[tuple[float, bool]], every: list[tuple[float, bool]]) -> list[float]:
    """Each chosen step's length: the time to the next step boundary."""
    times = [t for t, _ in every]
    index = {t: i for i, t in enumerate(times)}
    return [times[index[t] + 1] - t for t, _ in chosen if index[t] + 1 < len(times)]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def report(args: argparse.Namespace, model: Path, settings: dict[str, Any]) -> dict[str, Any]:
    full = settings.get("0")
    out: dict[str, Any] = {
        "bench": "kv_memory_bench",
        "command": "python -m benchmarks.kv_memory_bench " + " ".join(sys.argv[1:]),
        "model": str(model),
        "budget_bytes": args.budget_bytes,
        "settings": {},
    }
    for name, s in settings.items():
        entry = {k: v for k, v in s.items() if k not in ("quality", "teacher_forced")}
        entry["conversations_in_budget"] = args.budget_bytes // s["kv_bytes_per_conversation"]
        if full is not None and name != "0":
            entry["quality"] = agreement(full["quality"], s["quality"], args.quality_tokens)
            if "teacher_forced" in s:
                entry["quality"]["teacher_forced"] = forced_agreement(s["teacher_forced"])
            for rate in ("decode_tokens_per_s", "batch_decode_tokens_per_s"):
                if full.get(rate) and s.get(rate):  # decode_vs_full, batch_decode_vs_full
                    entry[rate.replace("tokens_per_s", "vs_full")] = round(s[rate] / full[rate], 3)
            entry["conversations_vs_full"] = round(
                full["kv_bytes_per_conversation"] / s["kv_bytes_per_conversation"], 3
            )
        out["settings"][name] = entry
    return out


def agreement(full: list[dict[str, Any]], quant: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Greedy agreement (tokens equal to full precision's, from the start) and the mean
    |logprob| difference of the chosen tokens where both agree."""
    agreed, diffs = [], []
    for a, b in zip(full, quant, strict=True):
        same = 0
        for x, y in zip(a["tokens"][:n], b["tokens"][:n], strict=False):
            if x != y:
                break
            same += 1
        agreed.append(same)
        diffs += [abs(p - q) for p, q in zip(a["logprobs"], b["logprobs"], strict=False)][:same]
    return {
        "mean_agreed_tokens": round(statistics.mean(agreed), 2),
        "token_agreement": round(sum(agreed) / (n * len(agreed)), 3),
        "prompts_fully_agreeing": sum(1 for a in agreed if a == n),
        "mean_abs_logprob_diff": round(statistics.mean(diffs), 4) if diffs else None,
    }


def forced_agreement(matches: list[list[bool]]) -> dict[str, Any]:
    """The second quality figure (the headline stays `token_agreement`): per-step top-1
    agreement given full precision's own prefix, so one early flip does not hide how the
    rest of an answer would have agreed."""
    steps = [m for answer in matches for m in answer]
    return {
        "top1_agreement": round(sum(steps) / len(steps), 4) if steps else None,
        "steps": len(steps),
        "prompts_all_steps_agreeing": sum(1 for answer in matches if all(answer)),
    }


if __name__ == "__main__":
    main()
