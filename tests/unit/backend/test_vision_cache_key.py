"""backend.vision.cache_key: what the prefix cache sees of an image prompt."""

from __future__ import annotations

from mlxd.backend.vision import cache_key, needs_image_prefill
from mlxd.types import ImageInputs, PreparedImage

T = 9  # the image token


def inputs(*digests: str, tokens: int = 2) -> ImageInputs:
    return ImageInputs(
        tuple(PreparedImage({}, tokens, d, "") for d in digests), token_id=T, placeholder=""
    )


def test_same_image_same_key_other_image_departs_at_its_run() -> None:
    prompt = [1, 2, T, T, 3, T, T, 4]
    a = cache_key(prompt, inputs("aa" * 32, "bb" * 32))
    same = cache_key(prompt, inputs("aa" * 32, "bb" * 32))
    other = cache_key(prompt, inputs("aa" * 32, "cc" * 32))
    assert a == same
    assert a[:5] == other[:5] and a[5] != other[5]
    assert a[:2] == [1, 2] and a[4] == 3 and a[7] == 4  # text positions keep their ids
    assert all(k < 0 for k in (a[2], a[3], a[5], a[6]))  # never a token id
    assert a[2] == a[3] != a[5]


def test_image_prefill_is_needed_while_an_image_lies_beyond_the_cache() -> None:
    prompt = [1, T, T, 2, 3]
    images = inputs("aa" * 32)
    assert needs_image_prefill(prompt, images, 0)
    assert needs_image_prefill(prompt, images, 2)
    assert not needs_image_prefill(prompt, images, 3)


def test_an_images_positions_in_several_runs_carry_its_digest() -> None:
    """Tiles and rows (Idefics3, Pixtral) split an image's positions by structure tokens."""
    prompt = [1, T, 5, T, 6, T, T, 2]  # image a: 2 positions in two runs; image b: 2
    key = cache_key(prompt, inputs("aa" * 32, "bb" * 32))
    assert key[1] == key[3] != key[5] == key[6]
    assert [key[0], key[2], key[4], key[7]] == [1, 5, 6, 2]
