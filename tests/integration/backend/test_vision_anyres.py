"""LLaVA-Next's features as mlxd lays them out (backend/vision/anyres.py), on the tiny
checkpoint of tests/vision_families.py: the base image's equal mlx-vlm's own, and every aspect
ratio (wide, tall, square, padded either way) fills exactly the run its processor writes, and
every feature row ends with `image_newline`."""

from __future__ import annotations

import io
from typing import Any

import pytest

from mlxd.backend.vision import VisionParts, load_vision
from mlxd.backend.vision.embeddings import image_features
from mlxd.types import ImageInputs
from tests.vision_checkpoints import png_bytes
from tests.vision_families import make_family_checkpoint


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> VisionParts:
    path = make_family_checkpoint("llava_next", tmp_path_factory.mktemp("llava_next"))
    return load_vision(path, trust_remote_code=False)[1]


def pil(width: int, height: int, seed: int = 0) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(png_bytes(seed, width, height))).convert("RGB")


def embed(parts: VisionParts, image: Any) -> tuple[list[int], Any]:
    prepared = parts.processor.prepare(image)
    ids = [7, *parts.processor.encode(prepared.text), 9]
    inputs = ImageInputs((prepared,), parts.processor.image_token_id, parts.processor.image_token)
    return ids, image_features(parts.model, ids, inputs)[0]


def test_the_base_image_features_equal_mlx_vlms_own(parts: VisionParts) -> None:
    import mlx.core as mx

    image = pil(40, 30)
    _, ours = embed(parts, image)
    # mlx-vlm's model puts the base image's features (and only those) at its one image token.
    arrays = parts.processor.prepare(image).arrays
    one = mx.array([[7, parts.processor.image_token_id, 9]])
    theirs = parts.model.get_input_embeddings(one, mx.array(arrays["pixel_values"])).inputs_embeds
    base = theirs.shape[1] - 2
    assert base == 4  # a 28-pixel image in 14-pixel patches, CLS dropped
    assert mx.array_equal(ours[:, : 1 + base], theirs[:, : 1 + base]).item()
    assert not mx.array_equal(ours[:, 1 + base], ours[:, 1]).item()  # the grid follows


@pytest.mark.parametrize("size", [(40, 30), (30, 40), (64, 24), (24, 64), (28, 28), (90, 20)])
def test_every_aspect_fills_the_processors_run(parts: VisionParts, size: tuple[int, int]) -> None:
    ids, embeds = embed(parts, pil(*size))
    assert embeds.shape[:2] == (1, len(ids))  # a count mismatch raises inside image_features


def test_each_feature_row_ends_with_the_image_newline(parts: VisionParts) -> None:
    import mlx.core as mx

    # 40x30 -> a 2x2 tile grid, 4x4 features, nothing unpadded: rows of 4 + a newline.
    ids, embeds = embed(parts, pil(40, 30))
    rows = [1 + 4 + 5 * r for r in range(4)]
    newline = parts.model.image_newline  # type: ignore[attr-defined]
    for at in rows:
        assert mx.array_equal(embeds[0, at + 4], newline).item()
        assert not mx.array_equal(embeds[0, at + 3], newline).item()
    assert len(ids) == 1 + 4 + 5 * 4 + 1
