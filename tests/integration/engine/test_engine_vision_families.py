"""The vision families beside llava (tests/vision_families.py) through the engine, each against
mlx-vlm 0.7.10 itself on the same tiny checkpoint: the prompt ids equal its processor's
(image splitting, break and end tokens included), greedy tokens equal its own one-request
generation, alone == inside a batch of 8 with text and other image requests, different
images give different answers, the prefix cache hits a second turn about the same image and
equals a cache-off run, several images in one message and images in two turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlxd.chat.images import data_url
from mlxd.chat.session import start_chat
from mlxd.engine import Engine, EngineRequest, ModelInfo
from mlxd.types import SamplingParams
from tests.chat_requests import chat_request
from tests.integration.engine.conftest import EngineFactory
from tests.integration.engine.test_engine_vision import GREEDY, answer, text_turn, uncached
from tests.vision_checkpoints import png_bytes
from tests.vision_families import FAMILIES, make_family_checkpoint

pytestmark = pytest.mark.parametrize("family", sorted(FAMILIES), indirect=True)
SIZES = ((40, 30), (64, 24))  # two aspect ratios: variable-resolution towers differ in layout


@pytest.fixture(scope="module")
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    name: str = request.param
    return make_family_checkpoint(name, tmp_path_factory.mktemp(name))


def image_part(seed: int, size: tuple[int, int] = SIZES[0]) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(png_bytes(seed, *size))}}


def turn(*parts: dict[str, Any], text: str = "What is in this picture?") -> dict[str, Any]:
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


def run(engine: Engine, info: ModelInfo, messages: list[dict[str, Any]]) -> Any:
    stream = start_chat(engine, info, chat_request(messages, GREEDY))
    text, finish = answer(stream)
    return stream.prompt, text, finish


def mlx_vlm_reference(
    path: Path, messages: list[dict[str, Any]], images: list[tuple[int, tuple[int, int]]], tmp: Path
) -> tuple[list[int], list[int]]:
    """(prompt ids, greedy tokens) of mlx-vlm's own processor and one-request generation on
    the checkpoint's template rendering of `messages` (image parts as {"type": "image"})."""
    from mlx_vlm.generate import stream_generate
    from mlx_vlm.utils import load, prepare_inputs

    model, processor = load(str(path))
    shown = [
        {**m, "content": [p if p["type"] == "text" else {"type": "image"} for p in m["content"]]}
        if isinstance(m["content"], list)
        else m
        for m in messages
    ]
    prompt = processor.tokenizer.apply_chat_template(
        shown, tokenize=False, add_generation_prompt=True
    )
    files = []
    for seed, size in images:
        files.append(str(tmp / f"{seed}-{size[0]}x{size[1]}.png"))
        Path(files[-1]).write_bytes(png_bytes(seed, *size))
    from PIL import Image

    pil = [Image.open(f).convert("RGB") for f in files]
    ids = prepare_inputs(processor, images=pil, prompts=prompt)["input_ids"]
    tokens = [
        int(r.token)
        for r in stream_generate(
            model, processor, prompt, image=files, max_tokens=GREEDY["max_tokens"],
            temperature=0.0,
        )
    ]  # fmt: skip
    return [int(t) for t in ids[0].tolist()], tokens


def direct_reference(path: Path, prompt: Any, steps: int) -> list[int]:
    """Greedy tokens of mlx-vlm's language model run on the whole sequence at every step (no
    KV cache, no batch): the prompt's embeddings with its image features, then each token's."""
    import mlx.core as mx
    from mlx_vlm.utils import load_model

    from mlxd.backend.vision.embeddings import image_features

    model = load_model(path)
    embeds, _ = image_features(model, prompt.token_ids, prompt.images)
    tokens: list[int] = []
    for _ in range(steps):
        logits = model.language_model(None, inputs_embeds=embeds).logits
        tokens.append(int(mx.argmax(logits[0, -1]).item()))
        embedded = model.language_model.model.embed_tokens(mx.array([tokens[-1:]]))
        embeds = mx.concatenate([embeds, embedded], axis=1)
    return tokens


def model_type(path: Path) -> str:
    return str(json.loads((path / "config.json").read_text())["model_type"])


@pytest.fixture
def engine(make_engine: EngineFactory, family: Path) -> tuple[Engine, ModelInfo]:
    return uncached(make_engine, family)


def test_prompt_and_tokens_equal_mlx_vlms_own(
    engine: tuple[Engine, ModelInfo], family: Path, tmp_path: Path
) -> None:
    engine_, info = engine
    messages = [turn(image_part(0))]
    prompt = start_chat(engine_, info, chat_request(messages, GREEDY)).prompt
    params = SamplingParams(temperature=0.0, max_tokens=GREEDY["max_tokens"], ignore_eos=True)
    request = EngineRequest(info.name, prompt.token_ids, params, images=prompt.images)
    tokens, _ = engine_.submit(request).collect()
    ids, reference = mlx_vlm_reference(family, messages, [(0, SIZES[0])], tmp_path)
    assert prompt.token_ids == ids
    if model_type(family) == "llava_next":
        reference = direct_reference(family, prompt, len(tokens))
    # mlx-vlm stops at EOS (and yields it); mlxd ignores EOS here: compare what both made.
    n = min(len(tokens), len(reference))
    assert n >= 8 and tokens[:n] == reference[:n]


def test_alone_equals_inside_a_batch_of_text_and_image_requests(
    make_engine: EngineFactory, family: Path
) -> None:
    requests = [[turn(image_part(seed, SIZES[seed % 2]))] for seed in range(4)]
    requests += [text_turn(t) for t in ("Hello, how are you?", "The capital of France is",
                                        "Numbers: 0 1 2 3", "Hi")]  # fmt: skip
    alone_engine, alone_info = uncached(make_engine, family, max_batch=1)
    alone = [run(alone_engine, alone_info, messages)[1] for messages in requests]

    engine, info = uncached(make_engine, family, max_batch=8)
    streams = [start_chat(engine, info, chat_request(m, GREEDY)) for m in requests]
    assert [answer(stream)[0] for stream in streams] == alone


def test_different_images_give_different_answers(engine: tuple[Engine, ModelInfo]) -> None:
    answers = {run(*engine, [turn(image_part(seed))])[1] for seed in (0, 1, 2)}
    assert len(answers) > 1


def test_second_turn_on_the_same_image_hits_the_cache_and_equals_a_cold_run(
    make_engine: EngineFactory, family: Path
) -> None:
    engine = make_engine()
    info = engine.load_model(family)
    messages = [turn(image_part(3))]
    _, reply, first = run(engine, info, messages)
    messages += [{"role": "assistant", "content": reply}, turn(text="And the colours?")]
    _, second_reply, second = run(engine, info, messages)
    assert second.usage.cached_tokens >= first.usage.prompt_tokens
    cold = make_engine(prefix_cache_bytes=0)
    assert run(cold, cold.load_model(family), messages)[1] == second_reply


def test_two_images_in_one_message_and_in_two_turns(
    engine: tuple[Engine, ModelInfo], family: Path, tmp_path: Path
) -> None:
    both = [turn(image_part(4, SIZES[0]), image_part(5, SIZES[1]))]
    prompt, text, _ = run(*engine, both)
    ids, _ = mlx_vlm_reference(family, both, [(4, SIZES[0]), (5, SIZES[1])], tmp_path)
    assert prompt.token_ids == ids
    swapped = [turn(image_part(5, SIZES[1]), image_part(4, SIZES[0]))]
    assert run(*engine, swapped)[1] != text
    turns = [turn(image_part(4, SIZES[0])), {"role": "assistant", "content": "A picture."},
             turn(image_part(5, SIZES[1]), text="And this one?")]  # fmt: skip
    prompt, _, finish = run(*engine, turns)
    ids, _ = mlx_vlm_reference(family, turns, [(4, SIZES[0]), (5, SIZES[1])], tmp_path)
    assert prompt.token_ids == ids and finish.usage.prompt_tokens == len(ids)
