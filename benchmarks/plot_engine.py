"""Plot an engine_bench.py result: aggregate decode tok/s vs concurrency (engine vs raw
BatchGenerator, per checkpoint) and the 4x256 time-to-first-token picture.

  python -m benchmarks.plot_engine benchmarks/results/engine_bench.json [out.png]

Needs matplotlib (`pip install -e ".[bench]"`); the benchmarks themselves do not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    src = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else src.with_suffix(".png")
    result = json.loads(src.read_text())
    batch = result.get("aggregate_decode_tps", {})
    ttft = result.get("ttft_4x256")
    panels = len(batch) + (1 if ttft else 0)
    if not panels:
        sys.exit("nothing to plot: no aggregate_decode_tps or ttft_4x256 section")
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6), squeeze=False)
    axes_iter = iter(axes[0])
    for name, by_size in batch.items():
        ax = next(axes_iter)
        sizes = [int(s) for s in by_size]
        for key, style in (("engine", "o-"), ("raw", "s--")):
            label = "mlxd engine" if key == "engine" else "raw BatchGenerator"
            ax.plot(sizes, [by_size[str(s)][key] for s in sizes], style, label=label)
        for s in sizes:
            ax.annotate(
                f"{by_size[str(s)]['ratio_paired']:.2f}",
                (s, by_size[str(s)]["engine"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_title(f"aggregate decode, {result['checkpoints'].get(name, name)}", fontsize=9)
        ax.set_xlabel("concurrent requests (label: engine/raw, median of pairs)", fontsize=8)
        ax.set_ylabel("tokens/s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    if ttft:
        ax = next(axes_iter)
        runs = ttft["engine_ttfts_s_each_run"]
        each = [sorted(run)[i] for run in runs for i in range(len(run))]
        order = [i + 1 for run in runs for i in range(len(run))]
        ax.scatter(order, each, label="mlxd engine, each request")
        wave = ttft["mean_ttft_s_whole_wave"]
        ax.axhline(wave, color="C1", linestyle="--", label="whole-wave prefill (everyone)")
        ax.set_xticks(range(1, 5))
        ax.set_xlabel("request, in arrival order")
        ax.set_ylabel("time to first token (s)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"4 x 256-token prompts: mean ratio {ttft['ratio']:.2f}", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
