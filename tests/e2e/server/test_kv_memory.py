"""A real `mlxd serve --kv-bits 8` under an address-space cap (tests.hostile.memory_capped)
with a small KV byte budget: concurrent requests past the budget wait and complete, one that
can never fit is refused with the numbers, /health and /metrics report the KV bytes, and
the process is never killed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.checkpoints import make_checkpoint
from tests.e2e.server.serverproc import launch, server_env
from tests.hostile import memory_capped

BUDGET = 64 * 4 * 2 * 2 * 72 * 4  # four 64-token requests of the 8-bit medium checkpoint


def test_byte_budget_under_a_memory_cap(tmp_path: Path, checkpoints_dir: Path) -> None:
    model = make_checkpoint(checkpoints_dir / "kv-chat", "chat", size="medium")
    env = server_env(tmp_path, MLXD_KV_BUDGET_BYTES=str(BUDGET))
    server = launch(["--model", str(model), "--kv-bits", "8"], env, preexec_fn=memory_capped())
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:

            def ask(i: int) -> httpx.Response:
                body = {"model": "default", "prompt": f"{i} says", "max_tokens": 48,
                        "ignore_eos": True}  # fmt: skip
                return http.post("/v1/completions", json=body)

            with ThreadPoolExecutor(12) as pool:
                answers = list(pool.map(ask, range(12)))
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
    finally:
        server.stop()
