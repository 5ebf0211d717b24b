"""The engine on the real SmolLM2 demo model (slow: marked demo)."""

from __future__ import annotations

import pytest

from mlxd.engine import EngineRequest
from mlxd.types import FinishReason, SamplingParams


@pytest.mark.demo
def test_demo_model_answers_alone_and_batched_alike(make_engine, demo_model) -> None:
    engine = make_engine(max_batch=2)
    info = engine.load_model(demo_model.path, name=demo_model.name)
    assert info.context_window == 8192
    questions = ["What is the capital of France?", "What is 2+2?"]
    prompts = [
        info.tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True
        )
        for q in questions
    ]
    params = SamplingParams(max_tokens=10)
    alone = engine.submit(EngineRequest(info.name, prompts[0], params)).collect()
    handles = [engine.submit(EngineRequest(info.name, p, params)) for p in prompts]
    batched = [h.collect() for h in handles]
    assert "Paris" in info.tokenizer.decode(alone[0])
    assert batched[0][0] == alone[0]
    assert alone[1].reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert batched[0][1].usage.cached_tokens > 0  # the same prompt again: prefix reused
