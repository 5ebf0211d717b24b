"""The tiny llava checkpoint against mlx-vlm 0.7.10 itself, as the other families are
(test_engine_vision_families.py): prompt ids equal its processor's and greedy tokens its own
one-request generation (fails on a wrong decode position), for one image, two different
images in one message, and images in two turns.

mlx-vlm's llava processor passes the tokenizer's `padding` to the image processor, which
transformers 5.24 refuses; the reference runs with that one argument kept from the image
processor (as benchmarks/vision_bench.py's peer shim does), nothing else changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlxd.chat.session import start_chat
from mlxd.engine import Engine, EngineRequest, ModelInfo
from mlxd.types import SamplingParams
from tests.chat_requests import chat_request
from tests.integration.engine.conftest import EngineFactory
from tests.integration.engine.test_engine_vision import GREEDY, uncached
from tests.integration.engine.test_engine_vision_families import (
    SIZES,
    image_part,
    mlx_vlm_reference,
    run,
    turn,
)


@pytest.fixture
def images_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """mlx-vlm's llava processor calls its image processor with the images alone."""
    from mlx_vlm.models.llava import processing_llava

    shipped = processing_llava.LlavaProcessor.__call__

    def call(self: Any, images: Any = None, text: Any = None, **kwargs: Any) -> Any:
        real = self.image_processor
        self.image_processor = lambda pictures, **_: real(pictures)
        try:
            return shipped(self, images=images, text=text, **kwargs)
        finally:
            self.image_processor = real

    monkeypatch.setattr(processing_llava.LlavaProcessor, "__call__", call)


@pytest.fixture
def llava(make_engine: EngineFactory, tiny_vision_model: Path) -> tuple[Engine, ModelInfo]:
    return uncached(make_engine, tiny_vision_model)


CASES = {
    "one image": ([turn(image_part(0))], [(0, SIZES[0])]),
    "two in one message": (
        [turn(image_part(4, SIZES[0]), image_part(5, SIZES[1]))],
        [(4, SIZES[0]), (5, SIZES[1])],
    ),
    "two turns": (
        [
            turn(image_part(4, SIZES[0])),
            {"role": "assistant", "content": "A picture."},
            turn(image_part(5, SIZES[1]), text="And this one?"),
        ],
        [(4, SIZES[0]), (5, SIZES[1])],
    ),  # fmt: skip
}


@pytest.mark.usefixtures("images_only")
@pytest.mark.parametrize("case", sorted(CASES))
def test_prompt_and_tokens_equal_mlx_vlms_own(
    llava: tuple[Engine, ModelInfo], tiny_vision_model: Path, tmp_path: Path, case: str
) -> None:
    engine, info = llava
    messages, images = CASES[case]
    prompt = start_chat(engine, info, chat_request(messages, GREEDY)).prompt
    params = SamplingParams(temperature=0.0, max_tokens=GREEDY["max_tokens"], ignore_eos=True)
    request = EngineRequest(info.name, prompt.token_ids, params, images=prompt.images)
    tokens, _ = engine.submit(request).collect()
    ids, reference = mlx_vlm_reference(tiny_vision_model, messages, images, tmp_path)
    assert prompt.token_ids == ids
    n = min(len(tokens), len(reference))  # mlx-vlm stops at EOS; mlxd ignores it here
    assert n >= 8 and tokens[:n] == reference[:n]


def test_the_order_of_two_images_matters(llava: tuple[Engine, ModelInfo]) -> None:
    answers = {run(*llava, [turn(image_part(a), image_part(b))])[1] for a, b in ((4, 5), (5, 4))}
    assert len(answers) == 2
