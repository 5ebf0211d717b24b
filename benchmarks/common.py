"""What the benchmarks share: free ports, starting and stopping servers, reading a stream of
chat chunks, percentiles, facts of a generated checkpoint, loading the fast BLAS first, JSON
output.

Every benchmark runs from the repository root as `python -m benchmarks.NAME`, so `benchmarks`
and `tests` import as packages: checkpoints are built by tests/checkpoints.py's
`make_checkpoint` (and tests/vision_checkpoints.py), the same ones the tests run on.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


# ---- output ---------------------------------------------------------------------------


def emit(report: object, indent: int | None = 2) -> None:
    """The benchmark's result: one JSON object on stdout (progress goes to stderr)."""
    print(json.dumps(report, indent=indent, ensure_ascii=False))


def progress(label: str, value: object) -> None:
    """One line of progress on stderr, so a long run shows where it is."""
    print(f"{label}: {json.dumps(value)}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    """The p-th percentile of sorted `values` (inclusive method; 0 for no values)."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(int(p), 99) - 1]


# ---- the fast BLAS and generated checkpoints -------------------------------------------


def fast_blas() -> str:
    """Loads the BLAS mlxd runs on (MKL unless MLXD_BLAS=reference) before anything imports
    mlx, for mlxd and raw mlx-lm alike, as building a backend does; returns which one is active."""
    from mlxd.backend.native import prepare_mlx

    info = prepare_mlx()
    return f"{info.name}: {info.detail}"


def scratch(prefix: str) -> Path:
    """A new temporary directory, removed when the process exits (checkpoints of a run can
    weigh gigabytes)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def param_count(model_dir: Path) -> int:
    import mlx.core as mx

    weights = mx.load(str(model_dir / "model.safetensors"))
    return int(sum(v.size for v in weights.values()))  # type: ignore[union-attr]


def token_count(model_dir: Path, text: str) -> int:
    """Tokens of `text` under the checkpoint's tokenizer.json (no chat template)."""
    from tokenizers import Tokenizer

    return len(Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(text).ids)


def eos_id(model_dir: Path) -> int:
    """The checkpoint's EOS id (its first, when config.json lists several)."""
    value = json.loads((model_dir / "config.json").read_text())["eos_token_id"]
    return int(value[0] if isinstance(value, list) else value)


def isolated_env(work: Path, **extra: str) -> dict[str, str]:
    """This environment with a store and a Hub cache of the run's own, offline, and no API key
    or server URL of the user's."""
    env = dict(os.environ, MLXD_HOME=str(work / "home"), HF_HOME=str(work / "hf"))
    for name in ("MLXD_API_KEY", "MLXD_SERVER"):
        env.pop(name, None)
    return env | {"HF_HUB_OFFLINE": "1"} | extra


# ---- an agent's workload -------------------------------------------------------------


def agent_rules(count: int) -> str:
    """A coding agent's numbered house rules (about 30 tokens each), for a long system prompt."""
    return "\n".join(
        f"{i}. When you change module_{i}.py, read it first, keep its public names, run the "
        f"tests of package_{i % 7}, and explain the change in one short paragraph."
        for i in range(1, count + 1)
    )


def tool_result(step: int, functions: int) -> str:
    """A source file as a read_file tool would return it (about 35 tokens per function)."""
    lines = [
        f"def handler_{step}_{i}(request, limit={i}):\n    return request.items[:limit]  # {i}"
        for i in range(functions)
    ]
    return f"# src/app/module_{step}.py\n" + "\n\n".join(lines)


# ---- servers --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mlxd_serve(model: Path | str, port: int, *extra: str) -> list[str]:
    """The command of `mlxd serve` on this interpreter."""
    return [PY, "-m", "mlxd.cli.main", "serve", "--model", str(model), "--port", str(port), *extra]


def blas_env(env: dict[str, str], blas: str, python: str, peer: bool) -> dict[str, str]:
    """A server's environment for `blas`: `mkl` everywhere, what each `ships` with (mlxd MKL,
    the peers mlx's reference BLAS) or `reference` everywhere. mlxd picks it by MLXD_BLAS; a
    peer (run by `python`) gets MKL by preloading the runtime from its venv, else this one."""
    env = dict(env, MLXD_BLAS="mkl" if blas in ("mkl", "ships") else "reference")
    if peer and blas == "mkl":
        lib = Path(python).resolve().parents[1] / "lib" / "libmkl_rt.so.3"
        if not lib.is_file():
            lib = Path(sys.prefix) / "lib" / "libmkl_rt.so.3"
        env.update(LD_PRELOAD=str(lib), MKL_THREADING_LAYER="SEQUENTIAL")
    return env


def wait_ready(
    proc: subprocess.Popen[bytes], port: int, what: str, path: str = "/v1/models", seconds=300.0
) -> str:
    """The server's base URL once `path` answers 200; kills it and raises if it exits or takes
    longer than `seconds`."""
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{what} did not start")


def stop(proc: subprocess.Popen[bytes], seconds: float = 30.0, group: bool = False) -> None:
    """SIGTERM a server, SIGKILL if it has not exited after `seconds`. `group`: its whole
    process group (mlx.launch and its ranks), and whatever of it is left half a second after
    the launcher exits is killed."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            continue
        if not group:
            return
        time.sleep(0.5)  # the ranks leave after the launcher


@contextmanager
def running(
    cmd: list[str],
    port: int,
    env: dict[str, str],
    *,
    ready: str = "/v1/models",
    seconds: float = 300.0,
    log: Path | None = None,
    group: bool = False,
) -> Iterator[str]:
    """A server started with `cmd` (listening on `port`) for the with-block; yields its base
    URL once GET `ready` answers 200, stops it at the end. `group`: a new session, stopped as
    a whole (mlx.launch), with an open pipe as stdin (at end of file mlx.launch spins a core
    polling it). stderr goes to `log` if given (its tail is in the error if the server never
    becomes ready), else nowhere."""
    err = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.PIPE if group else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=group,
    )
    try:
        try:
            url = wait_ready(proc, port, f"{' '.join(cmd[:6])}...", ready, seconds)
        except RuntimeError as exc:
            tail = log.read_text(errors="replace")[-2000:] if log else ""
            raise RuntimeError(f"{exc}\n{tail}".rstrip()) from None
        yield url
    finally:
        stop(proc, 60.0, group)
        if log:
            err.close()  # type: ignore[union-attr]


# ---- streaming chat completions -------------------------------------------------------


@dataclass
class Sample:
    """One streamed request: time to first visible text, the gaps between chunks, tokens."""

    ttft: float
    gaps: list[float] = field(default_factory=list)
    tokens: int = 0
    text: str = ""  # the visible text, in order


async def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """Lines split on LF only, as SSE defines them (aiter_lines also splits on U+2028 etc.)."""
    buf = b""
    async for chunk in response.aiter_bytes():
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode()


async def stream_chat(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, object],
    endpoint: str = "/v1/chat/completions",
) -> Sample:
    """POST a streaming /v1/chat/completions (or the text /v1/completions, `endpoint`); its
    timings and completion tokens (the usage chunk's count, else the chunks with text)."""
    t0 = last = time.perf_counter()
    sample: Sample | None = None
    chunks = usage_tokens = 0
    text = ""
    async with client.stream("POST", url + endpoint, json=body) as r:
        r.raise_for_status()
        async for line in sse_lines(r):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage_tokens = data["usage"]["completion_tokens"]
            piece = _chunk_text(data)
            if not piece:
                continue
            text += piece
            now = time.perf_counter()
            chunks += 1
            if sample is None:
                sample = Sample(ttft=now - t0)
            else:
                sample.gaps.append(now - last)
            last = now
    if sample is None:  # nothing visible streamed (held back to the end): the client's TTFT
        sample = Sample(ttft=time.perf_counter() - t0)
    sample.tokens = usage_tokens or chunks
    sample.text = text
    return sample


def _chunk_text(data: dict[str, Any]) -> str:
    if not data.get("choices"):
        return ""
    choice = data["choices"][0]
    delta = choice.get("delta") or {}
    text = choice.get("text") or delta.get("content") or delta.get("reasoning_content")
    text = text or delta.get("reasoning")
    return str(text or "")
