"""A real `mlxd serve --prefix-cache-dir` against a hostile directory: a forged cache file (its
digest's name, our metadata, a KV array reshaped to the same byte count) fails no stream, not
even its own: its request is served as a cache miss while 4 unrelated streams run beside it,
the file is deleted and /metrics counts it. A directory holding files mlxd did not write is
refused at start, in one line."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env
from tests.hostile import forge_snapshot, memory_capped

SYSTEM = "You are a helpful assistant. The quick brown fox jumps over the lazy dog, 0 1 2 3."
TARGET = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello there!"}]
GREEDY = {"max_tokens": 8, "temperature": 0.0}


def answer(server: ServerProcess, messages: list[Any]) -> str:
    body = {"messages": messages, **GREEDY}
    r = httpx.post(server.base_url + "/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text + "".join(server.stderr)
    return str(r.json()["choices"][0]["message"]["content"])


def long_stream(server: ServerProcess, i: int, started: threading.Semaphore) -> tuple[int, str]:
    """A streamed answer of 1000 tokens; `started` is released once its first chunk came."""
    messages = [{"role": "user", "content": f"Stream {i}: count slowly to one thousand."}]
    body = {"messages": messages, "max_tokens": 1000, "ignore_eos": True, "stream": True}
    text, first = "", True
    with httpx.stream("POST", server.base_url + "/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if first and line.startswith("data:"):
                started.release()
                first = False
            text += line + "\n"
    return r.status_code, text


def test_a_forged_cache_file_is_a_miss_and_fails_no_stream(
    tiny_chat_model: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "prefix"
    args = ["--model", str(tiny_chat_model), "--prefix-cache-dir", str(cache)]
    env = server_env(tmp_path)
    first = launch(args, env)
    expected = answer(first, TARGET)
    first.stop()
    forged = [forge_snapshot(path) for path in sorted(cache.glob("*/*.safetensors"))]
    assert forged

    srv = launch(args, env, preexec_fn=memory_capped())
    try:
        with ThreadPoolExecutor(4) as pool:
            started = threading.Semaphore(0)
            streams = [pool.submit(long_stream, srv, i, started) for i in range(4)]
            for _ in streams:  # the 4 streams decode: the forged file's request joins them
                assert started.acquire(timeout=120)
            content = answer(srv, TARGET)
            results = [s.result() for s in streams]
        assert content == expected  # served, as if nothing had been cached
        for status, text in results:
            assert status == 200 and '"error"' not in text and text.rstrip().endswith("[DONE]")
        stats = httpx.get(srv.url + "/metrics", timeout=30).text
        assert metric(stats, "mlxd_prefix_cache_files_rejected_total") >= 1
        dropped = "".join(line for line in srv.stderr if "prefix cache: dropped" in line)
        assert dropped and not any(path.exists() for path in forged if path.name in dropped)
        assert answer(srv, TARGET) == expected  # and again, the file gone
        assert srv.proc.poll() is None
    finally:
        srv.stop()


def test_a_directory_of_other_files_is_refused_at_start(
    tiny_chat_model: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    (models / "weights").mkdir(parents=True)
    (models / "weights" / "model.safetensors").write_bytes(b"not ours")
    cmd = [sys.executable, "-m", "mlxd.cli.main", "serve", "--port", "0"]
    done = subprocess.run(
        [*cmd, "--model", str(tiny_chat_model), "--prefix-cache-dir", str(models)],
        env=server_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "holds 'weights', which mlxd did not write" in lines[0]
    assert (models / "weights" / "model.safetensors").read_bytes() == b"not ours"
