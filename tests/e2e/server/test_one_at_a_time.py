"""A real `mlxd serve` of a model whose cache the batch cannot hold (llama4's ChunkedKVCache):
its ready line says it is served one at a time; concurrent streamed requests each get their
answer alone, stop strings and max_tokens as for any model."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.checkpoints import make_checkpoint
from tests.e2e.server.serverproc import launch, server_env


def test_served_one_at_a_time(tmp_path: Path, checkpoints_dir: Path) -> None:
    model = make_checkpoint(checkpoints_dir / "tiny-chunked-serve", "chunked")
    server = launch(["--model", str(model)], server_env(tmp_path))
    try:
        assert "served one at a time: its ChunkedKVCache cannot be batched" in "".join(
            server.stderr
        )
        with httpx.Client(base_url=server.base_url, timeout=120) as http:

            def ask(i: int, stop: str | None = None) -> tuple[str, str]:
                body = {"model": "default", "messages": [{"role": "user", "content": f"{i} says"}],
                        "max_tokens": 20, "stream": True, "stop": stop}  # fmt: skip
                text, reason = "", ""
                with http.stream("POST", "/chat/completions", json=body) as r:
                    assert r.status_code == 200
                    for line in r.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        choice = httpx.Response(200, content=line[6:]).json()["choices"][0]
                        text += choice["delta"].get("content") or ""
                        reason = choice["finish_reason"] or reason
                return text, reason

            alone = [ask(i) for i in range(3)]
            with ThreadPoolExecutor(3) as pool:
                together = list(pool.map(ask, range(3)))
            assert together == alone
            assert all(reason == "length" for _, reason in alone)
            text = alone[0][0]
            stop = text[len(text) // 2 : len(text) // 2 + 2]
            cut, reason = ask(0, stop)
            assert (cut, reason) == (text[: text.index(stop)], "stop")
        assert server.proc.poll() is None
    finally:
        server.stop()
