"""`mlxd run` and `mlxd serve` import only what they use: never transformers (nor
huggingface_hub's Hub client) for a model whose tokenizer loads through `tokenizers`; a model
that needs transformers still loads through it, with the same answer."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.e2e.server.serverproc import READY
from tests.signals import default_sigint

# Runs `mlxd run ...` as `python -m mlxd.cli.main` would, then writes the imported module names.
RECORD_IMPORTS = """
import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "mlxd"
runpy.run_module("mlxd.cli.main", run_name="__main__", alter_sys=True)
"""
HEAVY = ("transformers", "huggingface_hub.hf_api", "httpx2")


def run_recording(model: Path, out: Path, env: dict[str, str]) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", RECORD_IMPORTS, str(out), "run", str(model), "hi",
         "--max-tokens", "3", "--seed", "1"],
        capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, set(json.loads(out.read_text()))


def test_run_never_imports_transformers(
    tiny_chat_model: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    answer, modules = run_recording(tiny_chat_model, tmp_path / "modules.json", cli_env)
    assert answer
    assert {
        "mlx_lm.generate",
        "tokenizers",
        "mlxd.backend.tokenizer.checkpoint_tokenizer",
    } <= modules
    assert_lean(modules)


def assert_lean(modules: set[str]) -> None:
    # mlx_vlm and PIL come with the vision extra: only a vision model or an image needs them.
    assert not {m for m in modules if m.split(".")[0] in ("transformers", "mlx_vlm", "PIL")}
    assert not {m for m in modules if m in HEAVY or m.startswith("httpx2.")}


def test_serve_never_imports_transformers(
    tiny_chat_model: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "modules.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", RECORD_IMPORTS, str(out), "serve", "--port", "0",
         "--model", str(tiny_chat_model)],
        env=cli_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        ready = None
        while ready is None:
            line = proc.stderr.readline()
            assert line, "mlxd serve exited before it was ready"
            ready = READY.search(line)
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        reply = httpx.post(ready.group(2) + "/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert_lean(set(json.loads(out.read_text())))


def test_a_model_that_needs_transformers_answers_the_same(
    tiny_chat_model: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    legacy = tmp_path / "legacy"
    shutil.copytree(tiny_chat_model, legacy)
    vocab = json.loads((legacy / "tokenizer.json").read_text())["model"]["vocab"]
    # a token tokenizer.json does not add: only transformers would add it
    (legacy / "added_tokens.json").write_text(json.dumps({"<legacy_extra>": len(vocab) + 512}))
    fast, fast_modules = run_recording(tiny_chat_model, tmp_path / "fast.json", cli_env)
    slow, slow_modules = run_recording(legacy, tmp_path / "slow.json", cli_env)
    assert "transformers" in slow_modules and "transformers" not in fast_modules
    assert slow == fast
    shown = subprocess.run(
        [sys.executable, "-m", "mlxd.cli.main", "show", str(legacy), "--json"],
        capture_output=True, text=True, env=cli_env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert json.loads(shown.stdout)["tokenizer"] == {
        "loader": "transformers",
        "reason": "added_tokens.json with tokens tokenizer.json does not add at those ids",
    }
