"""Under the fast BLAS the engine's invariant still holds on real sizes: greedy alone == inside a
batch of 8 on the SmolLM2 demo model (float32, where MKL picks its kernels by matrix shape)."""

from __future__ import annotations

import pytest

from mlxd.backend import blas
from mlxd.engine import EngineRequest
from mlxd.types import SamplingParams

QUESTIONS = [
    "What is the capital of France?",
    "What is 2+2?",
    "Name a color.",
    "Write a haiku about rain.",
    "Who wrote Hamlet?",
    "Translate 'hello' to French.",
    "What is the largest planet?",
    "Give me a number between 1 and 10.",
]


@pytest.mark.demo
def test_demo_greedy_alone_equals_inside_a_batch_of_8(make_engine, demo_model) -> None:
    engine = make_engine(max_batch=8)
    info = engine.load_model(demo_model.path, name=demo_model.name)
    prompts = [
        info.tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True
        )
        for q in QUESTIONS
    ]
    params = SamplingParams(max_tokens=24)
    alone = [engine.submit(EngineRequest(info.name, p, params)).collect()[0] for p in prompts]
    handles = [engine.submit(EngineRequest(info.name, p, params)) for p in prompts]
    batched = [h.collect()[0] for h in handles]
    assert batched == alone, f"BLAS: {blas.active()}"
    assert len({tuple(a) for a in alone}) > 1  # distinct answers: the batch really mixed
