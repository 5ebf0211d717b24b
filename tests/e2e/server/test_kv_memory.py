"""A real `mlxd serve --kv-bits 8` under an address-space cap (tests.hostile.memory_capped)
with a small KV byte budget: concurrent requests past the budget wait and complete, one that
can never fit is refused with the numbers, /health and /metrics report the KV bytes, and
the process is never killed. The cap is the server's own: the address space the same server
reached serving one request uncapped (interpreter, libraries, weights), plus the KV budget,
plus a margin for what concurrency adds (thread stacks, malloc arenas)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.checkpoints import make_checkpoint
from tests.e2e.server.serverproc import launch, server_env
from tests.hostile import memory_capped

BUDGET = 64 * 4 * 2 * 2 * 72 * 4  # four 64-token requests of the 8-bit medium checkpoint
MARGIN = 256 << 20  # what a dozen concurrent requests add (measured: 28 MiB)


def _address_space_peak(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmPeak")


def _ask(http: httpx.Client, i: int) -> httpx.Response:
    body = {"model": "default", "prompt": f"{i} says", "max_tokens": 48, "ignore_eos": True}
    return http.post("/v1/completions", json=body)


def _one_request_peak(model: Path, env: dict[str, str]) -> int:
    """The address space an uncapped server reaches loading `model` and serving one request."""
    server = launch(["--model", str(model), "--kv-bits", "8"], env)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            assert _ask(http, 0).status_code == 200
        return _address_space_peak(server.proc.pid)
    finally:
        server.stop()


def test_byte_budget_under_a_memory_cap(tmp_path: Path, checkpoints_dir: Path) -> None:
    model = make_checkpoint(checkpoints_dir / "kv-chat", "chat", size="medium")
    env = server_env(tmp_path, MLXD_KV_BUDGET_BYTES=str(BUDGET), MALLOC_ARENA_MAX="2")
    cap = _one_request_peak(model, env) + BUDGET + MARGIN
    server = launch(["--model", str(model), "--kv-bits", "8"], env, preexec_fn=memory_capped(cap))
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            with ThreadPoolExecutor(12) as pool:
                answers = list(pool.map(lambda i: _ask(http, i), range(12)))
            assert [r.status_code for r in answers] == [200] * 12
            assert all(r.json()["usage"]["completion_tokens"] == 48 for r in answers)
            huge = {"model": "default", "prompt": "hi", "max_tokens": 1000}
            refused = http.post("/v1/completions", json=huge)
            assert refused.status_code == 400
            assert f"more than the KV budget of {BUDGET} bytes" in refused.text
            assert "1152 bytes per token" in refused.text  # 8-bit KV of this checkpoint
            health = http.get("/health").json()
            assert health["kv"] == {"bytes_in_use": 0, "budget_bytes": BUDGET, "bytes_free": BUDGET}
            metrics = http.get("/metrics").text
            assert f"mlxd_kv_budget_bytes {BUDGET}" in metrics
            assert "mlxd_kv_bytes_in_use 0" in metrics
        assert server.proc.poll() is None  # never killed
        assert _address_space_peak(server.proc.pid) <= cap
    finally:
        server.stop()


def test_16_bit_keys_over_8_bit_values(tmp_path: Path, checkpoints_dir: Path) -> None:
    """`serve --kv-bits 8 --kv-key-bits 16`: requests are answered, and admission counts the
    setting's bytes: 16-bit keys (64 x 2 bytes + a float32 scale and bias) and 8-bit values
    (64 + a float32 scale and bias) per head, 4 layers x 2 KV heads."""
    model = make_checkpoint(checkpoints_dir / "kv-chat", "chat", size="medium")
    env = server_env(tmp_path, MLXD_KV_BUDGET_BYTES=str(BUDGET))
    server = launch(["--model", str(model), "--kv-bits", "8", "--kv-key-bits", "16"], env)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            with ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(lambda i: _ask(http, i), range(4)))
            assert [r.json()["usage"]["completion_tokens"] for r in answers] == [48] * 4
            huge = {"model": "default", "prompt": "hi", "max_tokens": 1000}
            refused = http.post("/v1/completions", json=huge)
            assert refused.status_code == 400
            assert f"{8 * (136 + 72)} bytes per token" in refused.text, refused.text
            assert _ask(http, 5).status_code == 200  # and the next request is served
    finally:
        server.stop()
