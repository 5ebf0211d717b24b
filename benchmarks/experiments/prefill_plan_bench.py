"""Prefill grouping policies side by side on the real BatchRunner, in a closed loop, no HTTP.

N clients each send --requests/N prompts (distinct random tokens, --prompt-tokens long) one
after another, every request decoding --max-tokens (EOS ignored), as server_bench does; a
client's next prompt is inserted in the step after its previous request ends. Per policy and
client count: time to first token from insert to the step that returns it (mean, p99, max),
tokens/s, the group sizes started and the planner's G over one prompt's prefill cost.
Policies: `planner` (backend/prefill_plan.py as it is), `one` (one prompt per group),
`threesteps` (the rule before: together while each prompt's padded tokens cost less than 3
decode steps), `all` (every waiting prompt in one group, up to --prefill-batch, as vllm-mlx
does). Each (policy, clients) cell runs in a fresh runner after a warm-up request; --rounds
repeats every cell in alternating policy order; the summary is the median of rounds.

    python -m benchmarks.experiments.prefill_plan_bench --kind tiny --concurrency 1,8,16
    python -m benchmarks.experiments.prefill_plan_bench --kind big --max-tokens 32 --requests 16
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from benchmarks.common import emit, fast_blas, pct, progress, scratch

fast_blas()  # before mlx is imported

from mlxd.backend.api import BackendConfig, LoadedModel, NewSequence  # noqa: E402
from mlxd.backend.batch import BatchRunner  # noqa: E402
from mlxd.backend.loader import load_checkpoint  # noqa: E402
from mlxd.backend.prefill_plan import STEPS_TO_FIRST_TOKEN, PrefillPlanner  # noqa: E402
from mlxd.backend.prefix.cache import PrefixCache  # noqa: E402
from mlxd.types import SamplingParams  # noqa: E402

Policy = Callable[[PrefillPlanner, list[int]], int]


def _one(planner: PrefillPlanner, lengths: list[int]) -> int:
    return 1


def _all(planner: PrefillPlanner, lengths: list[int]) -> int:
    return max(1, min(len(lengths), planner.max_prompts))


def _three_steps(planner: PrefillPlanner, lengths: list[int]) -> int:
    """The rule before the queue objective: add while each costs less than 3 decode steps."""
    if not planner.measured:
        return PrefillPlanner.plan(planner, lengths)  # the static budget
    assert planner.token_s is not None and planner.decode_s is not None
    count = longest = 0
    for length in lengths[: planner.max_prompts]:
        candidate = max(longest, length)
        added = candidate * (count + 1) - longest * count
        if count and (
            candidate > planner.chunk
            or planner.token_s * added >= STEPS_TO_FIRST_TOKEN * planner.decode_s
        ):
            break
        count, longest = count + 1, candidate
    return max(count, 1)


POLICIES: dict[str, Policy | None] = {
    "planner": None,
    "one": _one,
    "threesteps": _three_steps,
    "all": _all,
}


def run_cell(
    loaded: LoadedModel, policy: str, clients: int, args: argparse.Namespace, seed: int
) -> dict[str, float]:
    runner = BatchRunner(
        loaded,
        "m",
        PrefixCache(0),
        BackendConfig(
            max_batch=args.max_batch,
            prefill_chunk=args.prefill_chunk,
            prefill_batch=args.prefill_batch,
            prefill_group_tokens=256,
        ),
    )
    planner = runner._planner
    assert planner is not None
    rule = POLICIES[policy]
    if rule is not None:
        planner.plan = lambda waiting: rule(planner, list(waiting))  # type: ignore[method-assign]
    rng = random.Random(seed)
    vocab = loaded.vocab_size

    def prompt() -> list[int]:
        return [rng.randrange(10, vocab - 10) for _ in range(args.prompt_tokens)]

    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    try:
        uid, _ = runner.insert(NewSequence(prompt(), params, args.max_tokens, "warm"))
        while not any(o.uid == uid and o.finish for o in runner.step().tokens):
            pass
        per_client = max(1, args.requests // clients)
        left = {c: per_client for c in range(clients)}
        inserted: dict[int, tuple[int, float]] = {}  # uid -> (client, insert time)
        waiting_first: set[int] = set()
        ttfts: list[float] = []
        tokens = 0

        def send(client: int) -> None:
            left[client] -= 1
            u, _ = runner.insert(NewSequence(prompt(), params, args.max_tokens, f"c{client}"))
            inserted[u] = (client, time.perf_counter())
            waiting_first.add(u)

        started = time.perf_counter()
        for c in range(clients):
            send(c)
        groups: dict[int, int] = {}  # prompts per started group -> how many such groups
        while inserted:
            waiting = len(runner.waiting_uids())
            result = runner.step()
            started_now = waiting - len(runner.waiting_uids())
            if started_now > 0:
                groups[started_now] = groups.get(started_now, 0) + 1
            now = time.perf_counter()
            for out in result.tokens:
                tokens += 1
                if out.uid in waiting_first:
                    waiting_first.discard(out.uid)
                    ttfts.append(now - inserted[out.uid][1])
                if out.finish is not None:
                    client, _ = inserted.pop(out.uid)
                    if left[client]:
                        send(client)
        wall = time.perf_counter() - started
    finally:
        runner.close()
    ttfts.sort()
    g_ratio = None  # the planner's G over one prompt's prefill cost (e * prompt tokens)
    if planner.group_s is not None and planner.token_s:
        g_ratio = round(planner.group_s / (planner.token_s * args.prompt_tokens), 2)
    return {
        "clients": clients,
        "requests": len(ttfts),
        "tok_s": round(tokens / wall, 1),
        "ttft_mean_ms": round(1000 * statistics.fmean(ttfts), 1),
        "ttft_p99_ms": round(1000 * pct(ttfts, 99), 1),
        "ttft_max_ms": round(1000 * ttfts[-1], 1),
        "groups": dict(sorted(groups.items())),
        "g_over_prompt": g_ratio,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="tiny", help="tests/checkpoints.py size: tiny/small/big")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=260)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--concurrency", default="1,8,16")
    parser.add_argument("--policies", default="planner,threesteps,one,all")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--prefill-batch", type=int, default=16)
    parser.add_argument("--prefill-chunk", type=int, default=512)
    args = parser.parse_args()
    from tests.checkpoints import make_checkpoint

    work = scratch("mlxd-plan-bench-")
    loaded = load_checkpoint(make_checkpoint(work / f"bench-{args.kind}", "chat", size=args.kind))
    policies = args.policies.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    results: dict[str, list[list[dict[str, float]]]] = {p: [] for p in policies}
    for r in range(args.rounds):
        for policy in policies if r % 2 == 0 else policies[::-1]:
            cells = [run_cell(loaded, policy, c, args, seed=1000 * r + c) for c in levels]
            results[policy].append(cells)
            progress(policy, cells)
    summary = {
        p: {
            key: [statistics.median(rnd[i][key] for rnd in rounds) for i in range(len(levels))]
            for key in ("tok_s", "ttft_mean_ms", "ttft_p99_ms", "ttft_max_ms")
        }
        for p, rounds in results.items()
    }
    report = {
        "checkpoint": args.kind,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "requests_per_level": args.requests,
        "concurrency": levels,
        "rounds": args.rounds,
        "results": results,
        "summary": summary,
    }
    emit(report)


if __name__ == "__main__":
    main()
