"""The prefill planner in a step-cost model of a closed loop: no mlx, deterministic, seconds.

What the planner's rules (backend/prefill_plan.py) were chosen with, since real runs on a
shared 2-core machine were too noisy to rank grouping rules. Each step costs `d0 + d1 * rows`
(the running batch's decode), plus `e * tokens` when it starts a group's prefill; a group takes
the planner's 3 steps to its first tokens (its second step also runs the group's last tokens,
`split * (d0 + d1 * members)`), then decodes --max-tokens. N clients each send their share
of --requests, the next when the previous ends (as server_bench does). The planner gets the
model's own d, e and G. Regimes are measured step costs of this machine (MKL): `tiny` the
0.25M checkpoint in process (quiet and loaded) and in a server (`tiny-server`: the engine's
per-step work makes G about one prompt's cost), `big` the 29M test checkpoint, `xl` the 93M
one (loaded and quiet). Rules: the planner as it is, `finest@S` the rule before (past the
slack S, the finest groups within it), `mean+last` that objective alone, one prompt per group,
whole waves (up to 16, as vllm-mlx's 8). Per regime and client count: TTFT mean / p99 and
tokens/s, as JSON.

    python -m benchmarks.experiments.prefill_plan_model
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from benchmarks.common import emit
from mlxd.backend import prefill_plan
from mlxd.backend.prefill_plan import PrefillPlanner, _waits

Rule = Callable[[PrefillPlanner, list[int]], int]
# name: (d0, d1, e, split): decode step = d0 + d1 * rows, e per prompt token (seconds).
REGIMES = {
    "tiny-quiet": (0.0005, 0.00005, 0.00003, 2.0),
    "tiny-loaded": (0.0015, 0.00015, 0.00004, 2.0),
    "tiny-server": (0.0013, 0.00008, 0.000025, 0.7),
    "big": (0.014, 0.005, 0.0012, 2.0),
    "xl": (0.045, 0.008, 0.0035, 0.1),
    "xl-quiet": (0.035, 0.006, 0.0025, 0.1),
}
LOADS = {"big": (32, 16), "xl": (64, 32), "xl-quiet": (64, 32)}  # else (128, 48)


def run(rule: Rule, clients: int, regime: tuple[float, ...], tokens: int, requests: int) -> dict:
    d0, d1, e, split = regime
    prompt = 260
    planner = PrefillPlanner(16, 256, 512)
    planner.decode_s, planner.token_s = d0 + d1 * clients / 2, e
    planner.group_s = 3 * planner.decode_s + split * (d0 + d1)
    now, done, ttfts = 0.0, 0, []
    left = {c: requests // clients - 1 for c in range(clients)}
    queue = [(c, 0.0) for c in range(clients)]  # (client, arrival)
    rows: dict[int, int] = {}  # client -> tokens still to decode
    group: list[tuple[int, float]] = []
    stage = 0  # steps the group has run (3: its first tokens come with this one)
    while queue or rows or group:
        cost = d0 + d1 * len(rows) if rows else 0.0
        if not group and queue:
            group = queue[: rule(planner, [prompt] * len(queue))]
            del queue[: len(group)]
            cost, stage = cost + e * prompt * len(group) + (0.0 if rows else d0), 1
        elif group and stage == 1:
            cost, stage = cost + split * (d0 + d1 * len(group)), 2
        elif group:
            cost, stage = max(cost, d0 + d1 * len(group)), 3
        now += cost
        for client in list(rows):
            rows[client] -= 1
            done += 1
            if not rows[client]:
                del rows[client]
                if left[client]:
                    left[client] -= 1
                    queue.append((client, now))
        if stage == 3:
            for client, arrived in group:
                ttfts.append(now - arrived)
                rows[client] = tokens - 1
            done += len(group)
            group, stage = [], 0
    ttfts.sort()
    p99 = statistics.quantiles(ttfts, n=100, method="inclusive")[98] if len(ttfts) > 1 else 0
    return {
        "ttft_mean_ms": round(1000 * statistics.fmean(ttfts), 1),
        "ttft_p99_ms": round(1000 * p99, 1),
        "tok_s": round(done / now, 1),
    }


def finest_within(slack: float) -> Rule:
    """The rule before: past the slack, the finest groups whose longest wait is within it."""

    def rule(planner: PrefillPlanner, lengths: list[int]) -> int:
        assert planner.token_s is not None
        most = planner._groupable(lengths)
        last = [
            _waits(lengths, s, planner.chunk, planner.token_s, planner.group_overhead)[-1]
            for s in range(1, most + 1)
        ]
        tail = next(s for s, w in enumerate(last, 1) if w <= min(last) * (1 + slack))
        return max(tail, planner._head_plan(lengths, most))

    return rule


def mean_plus_last(planner: PrefillPlanner, lengths: list[int]) -> int:
    assert planner.token_s is not None
    costs = []
    for s in range(1, planner._groupable(lengths) + 1):
        w = _waits(lengths, s, planner.chunk, planner.token_s, planner.group_overhead)
        costs.append(statistics.fmean(w) + w[-1])
    return 1 + costs.index(min(costs))


def main() -> None:
    rules: dict[str, Rule] = {
        "planner": lambda p, lengths: p.plan(lengths),
        "finest@0.4": finest_within(0.4),
        "finest@0.2": finest_within(0.2),
        "mean+last": mean_plus_last,
        "one": lambda p, lengths: 1,
        "all": lambda p, lengths: min(len(lengths), p.max_prompts),
    }
    report: dict[str, object] = {"compute_bound": prefill_plan.COMPUTE_BOUND}
    for name, regime in REGIMES.items():
        tokens, requests = LOADS.get(name, (128, 48))
        cells = {}
        for clients in (8, 16):
            base = run(rules["one"], clients, regime, tokens, requests)
            out = {}
            for rule_name, rule in rules.items():
                r = run(rule, clients, regime, tokens, requests)
                r["mean_vs_one"] = round(r["ttft_mean_ms"] / base["ttft_mean_ms"], 2)
                r["p99_vs_one"] = round(r["ttft_p99_ms"] / base["ttft_p99_ms"], 2)
                out[rule_name] = r
            cells[str(clients)] = out
        report[name] = {"max_tokens": tokens, "requests": requests, "by_clients": cells}
    emit(report)


if __name__ == "__main__":
    main()
