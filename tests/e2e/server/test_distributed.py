"""`mlxd serve` under `mlx.launch -n 2 --backend ring` on 127.0.0.1: rank 0 serves, rank 1
follows its steps on its half of the model (backend.distributed), split two ways:

- tensor: a llama checkpoint (it implements `shard`), `--shard tensor`: every rank holds half
  of every layer;
- pipeline: a qwen3_next checkpoint (no `shard`), `--shard auto` picks pipeline: rank 1 runs
  the first two layers, rank 0 the last two. A single-file checkpoint, no
  model.safetensors.index.json: mlxd loads lazily and evaluates only its own layers.

Greedy output must equal the single-process server's, alone and in a batch of 8. In float32
the tensor shards' partial sums differ from one matmul only in reduction order (logits within
~1e-5 of 15), far below the gaps between the top logits of these prompts; pipeline stages
run the same layers on the same numbers, only on two processes.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env

pytestmark = pytest.mark.timeout(240)

PROMPTS = [
    "Hello, how are you today?",
    "The capital of France is",
    "Numbers: 0 1 2 3",
    "def add(a, b):",
    "The quick brown fox",
    "Machine learning models",
    "Unicode: café naïve",
    "What is the weather like?",
]


def _free_ports(count: int) -> int:
    """A port P such that P .. P + count - 1 can all be bound now (a plain bind, as the ring's:
    a port a killed rank left in TIME_WAIT is refused too, so the next job does not hit it)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + count > 65536:
            continue
        try:
            for port in range(base + 1, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base


def _ring(ranks: int) -> list[str]:
    launcher = Path(sys.executable).with_name("mlx.launch")
    port = _free_ports(ranks)  # the ring listens on port, port + 1, ...
    return [str(launcher), "-n", str(ranks), "--backend", "ring", "-p", str(port)]


def _stop(srv: ServerProcess) -> None:
    if srv.proc.poll() is None:
        os.killpg(srv.proc.pid, signal.SIGTERM)
    try:
        srv.proc.wait(timeout=30)
    except Exception:
        os.killpg(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=10)


@dataclass(frozen=True)
class Layout:
    model: Path
    shard: str  # what the command line asks for
    chosen: str  # what the ready line reports


@pytest.fixture(scope="module", params=["tensor", "pipeline"])
def layout(request: pytest.FixtureRequest) -> Layout:
    if request.param == "tensor":
        return Layout(request.getfixturevalue("tiny_chat_model"), "tensor", "tensor")
    return Layout(request.getfixturevalue("tiny_gated_model"), "auto", "pipeline")


@pytest.fixture(scope="module")
def single(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(layout.model)], server_env(tmp_path_factory.mktemp("one")))
    yield srv
    srv.stop()


def launch_ranks(model: Path, shard: str, env: dict[str, str]) -> ServerProcess:
    """`mlxd serve` under `mlx.launch -n 2 --backend ring`, in its own process group."""
    return launch(
        ["--model", str(model), "--shard", shard],
        env,
        preexec_fn=os.setpgrp,  # the launcher and both ranks stop together
        launcher=[*_ring(2), "--python", sys.executable],
    )


@pytest.fixture(scope="module")
def ranks2(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = launch_ranks(layout.model, layout.shard, server_env(tmp_path_factory.mktemp("two")))
    yield srv
    _stop(srv)


def _complete(srv: ServerProcess, prompt: str, **extra: object) -> str:
    body = {"model": "default", "prompt": prompt, "max_tokens": 24, "temperature": 0} | extra
    r = httpx.post(srv.base_url + "/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["text"])


def _batch(srv: ServerProcess, **extra: object) -> list[str]:
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(lambda p: _complete(srv, p, **extra), PROMPTS))


def test_two_ranks_serve_and_say_so(layout: Layout, ranks2: ServerProcess) -> None:
    assert any(f"(2 ranks, {layout.chosen})" in line for line in ranks2.stderr), ranks2.stderr
    assert httpx.get(ranks2.url + "/health", timeout=10).status_code == 200


def test_greedy_alone_equals_one_process(single: ServerProcess, ranks2: ServerProcess) -> None:
    for prompt in PROMPTS:
        assert _complete(ranks2, prompt) == _complete(single, prompt), prompt


def test_greedy_batch_of_8_equals_one_process(single: ServerProcess, ranks2: ServerProcess) -> None:
    alone = [_complete(single, p) for p in PROMPTS]
    assert _batch(ranks2) == alone
    assert _batch(single) == alone


def test_seeded_sampling_repeats_and_unseeded_stays_in_lockstep(ranks2: ServerProcess) -> None:
    seeded = {"temperature": 1.0, "seed": 7}
    first = _batch(ranks2, **seeded)
    assert _batch(ranks2, **seeded) == first
    assert [_complete(ranks2, p, **seeded) for p in PROMPTS] == first
    # Unseeded: rank 0 picks each seed for every rank; the ring must stay healthy.
    _batch(ranks2, temperature=1.0)
    assert _complete(ranks2, PROMPTS[0]) == _complete(ranks2, PROMPTS[0])


def test_metrics_and_health_show_each_rank(
    layout: Layout, single: ServerProcess, ranks2: ServerProcess
) -> None:
    _complete(ranks2, PROMPTS[0])
    health = httpx.get(ranks2.url + "/health", timeout=10).json()
    assert [(r["rank"], r["up"]) for r in health["ranks"]] == [(0, True), (1, True)]
    assert 0 <= health["ranks"][1]["heartbeat_age_seconds"] < 10  # the stall bound (default)
    text = httpx.get(ranks2.url + "/metrics", timeout=10).text
    assert metric(text, f'mlxd_distributed_ranks{{layout="{layout.chosen}"}}') == 2
    assert metric(text, 'mlxd_rank_up{rank="1"}') == 1
    assert 'mlxd_rank_heartbeat_age_seconds{rank="1"}' in text
    # Every step is broadcast: at least one per generated token of that request.
    assert metric(text, "mlxd_lockstep_broadcast_seconds_count") >= 24
    assert metric(text, "mlxd_lockstep_broadcast_seconds_sum") > 0
    # A single process has no ranks to show.
    assert "ranks" not in httpx.get(single.url + "/health", timeout=10).json()
    assert "mlxd_rank_up" not in httpx.get(single.url + "/metrics", timeout=10).text
