"""Chat-layer fixtures: real tokenizers from the tiny checkpoints, scripted checkpoints whose
greedy output is known, and one engine per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoints import CHATML_TEMPLATE
from tests.integration.chat.scripted import (
    WEATHER_CALL,
    WEATHER_SCRIPT,
    make_scripted_checkpoint,
)

CALL = WEATHER_CALL
SCRIPT = list(WEATHER_SCRIPT)
# A template whose generation prompt opens <think>: the output starts inside reasoning.
OPEN_THINK_TEMPLATE = CHATML_TEMPLATE.replace(
    "{% if add_generation_prompt %}<|im_start|>assistant\n",
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>",
)
OPEN_SCRIPT = ["<think>", "Plan.", "</think>", "Done."]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {"type": "object"},
        },
    }
]


@pytest.fixture(scope="session")
def chat_tokenizer(tiny_chat_model: Path) -> Any:
    from mlx_lm.utils import load_tokenizer

    return load_tokenizer(tiny_chat_model)


@pytest.fixture(scope="session")
def base_tokenizer(tiny_base_model: Path) -> Any:
    from mlx_lm.utils import load_tokenizer

    return load_tokenizer(tiny_base_model)


@pytest.fixture(scope="session")
def scripted_model(checkpoints_dir: Path) -> Path:
    return make_scripted_checkpoint(checkpoints_dir / "scripted-chat", SCRIPT)


@pytest.fixture(scope="session")
def scripted_open_model(checkpoints_dir: Path) -> Path:
    return make_scripted_checkpoint(
        checkpoints_dir / "scripted-open", OPEN_SCRIPT, template=OPEN_THINK_TEMPLATE
    )


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    from mlxd.engine import Engine, EngineConfig

    eng = Engine(EngineConfig.from_settings(max_batch=4, max_models=4))  # tests use 3 models
    yield eng
    eng.close()


HARMONY_SCRIPT = [
    "<|channel|>",
    "analysis",
    "<|message|>",
    "Need the weather.",
    "<|end|>",
    # One chunk (the script's tokens must be distinct): the header of a function call.
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
    '{"city": "Paris"}',
    "<|call|>",
]


@pytest.fixture(scope="session")
def scripted_harmony_model(checkpoints_dir: Path) -> Path:
    """Harmony channel tokens in the vocabulary: detection picks GPT-OSS harmony parsing."""
    return make_scripted_checkpoint(checkpoints_dir / "scripted-harmony", HARMONY_SCRIPT)
