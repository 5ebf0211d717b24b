"""Fixtures for the server's end-to-end tests: real `mlxd serve` processes on free ports.

One shared server for the package (package-scoped) keeps the suite fast; every process gets
its own MLXD_HOME and HF_HOME and no network.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.integration.chat.scripted import make_scripted_checkpoint

# A script a tool-calling reasoning model could produce: think, then call one tool.
TOOL_SCRIPT = [
    "<think>",
    "Let me see.",
    "</think>",
    "<tool_call>",
    '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n',
    "</tool_call>",
]
# Arguments a parser could get wrong: nesting, a list, non-ASCII text, an escaped quote,
# numbers, a boolean and null. The model writes them with \u escapes: mlx-lm's BPE streaming
# detokenizer reads an added token's text as byte-level symbols, so a raw "é" in one would
# decode to U+FFFD (real models spell non-ASCII text with byte-level tokens).
TRIP_ARGS = {
    "city": "São Paulo",
    "days": 3,
    "budget": 1250.5,
    "tags": ["café", "museum"],
    "opts": {"metric": True, "note": 'say "hi"', "guide": None},
}
TRIP_SCRIPT = [
    "<tool_call>",
    "\n" + json.dumps({"name": "plan_trip", "arguments": TRIP_ARGS}) + "\n",
    "</tool_call>",
]

# One token per chunk: a stop string can span several tokens ("s forty-t" spans " is",
# " forty" and "-two"), and "Yes fine" holds a false start of it ("s f").
STOP_SCRIPT = ["Yes", " fine", ".", " It", " is", " forty", "-two", " now", "!"]
# Reasons in 4 tokens, then answers in 2 (then EOS: 9 completion tokens).
THINK_SCRIPT = ["<think>", "First", " I", " think", ".", "</think>", "Answer", "!"]
# Reasons forever ("Hmm more Hmm more ..."): only a reasoning budget gets it to "Paris."
PONDER_SCRIPT = ["<think>", "Hmm", " more", "</think>", "Paris", "."]
PONDERING = {" more": "Hmm"}
FIM_MIDDLE = "    return a + b"
# Greedy continues the script from the prompt's last token: FIM_MIDDLE only after <|fim_middle|>.
FIM_SCRIPT = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", FIM_MIDDLE]


@pytest.fixture(scope="package")
def server_home(tmp_path_factory: pytest.TempPathFactory, tiny_chat_model: Path) -> Path:
    """An MLXD_HOME whose store holds 'scripted' (thinks, then calls get_weather),
    'scripted-trip' (calls plan_trip with TRIP_ARGS), 'scripted-stop' (says STOP_SCRIPT),
    'scripted-think' (says THINK_SCRIPT), 'scripted-fim' (a fill-in-the-middle model: after
    <|fim_middle|> it says FIM_MIDDLE),
    'tiny-long' (tiny-chat with a 64k window, so one request can decode for seconds) and
    'tiny-short' (a 128-token window)."""
    home = tmp_path_factory.mktemp("serve-home")
    store = home / "mlxd" / "models"
    make_scripted_checkpoint(store / "scripted", TOOL_SCRIPT)
    make_scripted_checkpoint(store / "scripted-trip", TRIP_SCRIPT)
    make_scripted_checkpoint(store / "scripted-stop", STOP_SCRIPT)
    make_scripted_checkpoint(store / "scripted-think", THINK_SCRIPT)
    make_scripted_checkpoint(store / "scripted-ponder", PONDER_SCRIPT, successors=PONDERING)
    make_scripted_checkpoint(store / "scripted-fim", FIM_SCRIPT)
    shutil.copytree(tiny_chat_model, store / "tiny-long")
    config = json.loads((store / "tiny-long" / "config.json").read_text())
    config["max_position_embeddings"] = 65536
    (store / "tiny-long" / "config.json").write_text(json.dumps(config))
    shutil.copytree(tiny_chat_model, store / "tiny-short")
    config["max_position_embeddings"] = 128
    (store / "tiny-short" / "config.json").write_text(json.dumps(config))
    return home


@pytest.fixture(scope="package")
def server(tiny_chat_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    """One `mlxd serve --model tiny-chat` for the whole module."""
    srv = launch(["--model", str(tiny_chat_model), "--max-batch", "16"], server_env(server_home))
    yield srv
    srv.stop()


@pytest.fixture(scope="package")
def client(server: ServerProcess):  # type: ignore[no-untyped-def]
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="package")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    """A keep-alive client on the shared server (a fresh httpx client per call costs ~0.1 s)."""
    with httpx.Client(base_url=server.base_url, timeout=120) as c:
        yield c
