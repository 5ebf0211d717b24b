"""The image preparation step (chat.images, chat.builder.expand_images) with a fake processor:
limits from config.SETTINGS, refusals naming their part, image runs in the prompt."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest

from mlxd.chat.builder import expand_images
from mlxd.chat.images import ImageRef, data_url, load_images
from mlxd.chat.messages import image_refs
from mlxd.errors import InvalidRequest
from mlxd.types import ImageInputs, PreparedImage

IMAGE_TOKEN_ID = 99


class FakeProcessor:
    image_token = "<image>"
    image_token_id = IMAGE_TOKEN_ID

    def __init__(self) -> None:
        self.sizes: list[tuple[int, int]] = []

    def prepare(self, image: Any) -> PreparedImage:
        self.sizes.append(image.size)
        assert image.mode == "RGB"
        return PreparedImage(
            {"pixel_values": None}, tokens=3, digest=f"{image.size}", text="<image>" * 3
        )


def png(width: int = 5, height: int = 4, mode: str = "RGB") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, (width, height)).save(out, format="PNG")
    return out.getvalue()


def refs(*urls: str) -> list[ImageRef]:
    return [ImageRef(url, f"messages[0].content[{i}].image_url") for i, url in enumerate(urls)]


def test_images_are_decoded_to_rgb_in_order() -> None:
    processor = FakeProcessor()
    images = load_images(refs(data_url(png(5, 4, "L")), data_url(png(7, 2))), processor)
    assert images is not None
    assert processor.sizes == [(5, 4), (7, 2)]
    assert [i.digest for i in images.images] == ["(5, 4)", "(7, 2)"]
    assert images.token_id == IMAGE_TOKEN_ID


def test_limits_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_MAX_IMAGES", "2")
    with pytest.raises(InvalidRequest, match="too many images: 3") as e:
        load_images(refs(*[data_url(png())] * 3), FakeProcessor())
    assert e.value.param == "messages[0].content[2].image_url"
    monkeypatch.setenv("MLXD_IMAGE_MAX_PIXELS", "19")
    with pytest.raises(InvalidRequest, match="5x4 = 20 pixels"):
        load_images(refs(data_url(png(5, 4))), FakeProcessor())
    monkeypatch.setenv("MLXD_IMAGE_MAX_BYTES", "10")
    with pytest.raises(InvalidRequest, match="more than 10 bytes"):
        load_images(refs(data_url(png())), FakeProcessor())


def test_text_only_model_refuses_images_naming_the_part() -> None:
    with pytest.raises(InvalidRequest, match="text only") as e:
        load_images(refs(data_url(png())), None)
    assert e.value.param == "messages[0].content[0].image_url"


def test_media_type_must_be_an_image() -> None:
    url = "data:text/plain;base64," + base64.b64encode(png()).decode()
    with pytest.raises(InvalidRequest, match="not an image"):
        load_images(refs(url), FakeProcessor())


def test_processor_failures_are_the_images_fault() -> None:
    class Broken(FakeProcessor):
        def prepare(self, image: Any) -> PreparedImage:
            raise ValueError("boom")

    with pytest.raises(InvalidRequest, match="cannot use this image: ValueError: boom"):
        load_images(refs(data_url(png())), Broken())


def test_image_refs_follow_prompt_order_across_messages() -> None:
    part = {"type": "image_url", "image_url": {"url": "data:a"}}
    messages = [
        {"role": "user", "content": [part, {"type": "text", "text": "x"}]},
        {"role": "assistant", "content": "y"},
        {"role": "user", "content": [{"type": "text", "text": "z"}, part]},
    ]
    assert [r.param for r in image_refs(messages)] == [
        "messages[0].content[0].image_url",
        "messages[2].content[1].image_url",
    ]


def test_each_placeholder_becomes_its_images_text_and_counts_must_match() -> None:
    images = ImageInputs(
        (PreparedImage({}, 2, "a", "<s><i><i></s>"), PreparedImage({}, 3, "b", "<i>\n<i><i>")),
        token_id=IMAGE_TOKEN_ID,
        placeholder="<s>",
    )
    assert expand_images("x<s>y<s>z", images) == "x<s><i><i></s>y<i>\n<i><i>z"
    assert expand_images("x<s>y", images, some=True) == "x<s><i><i></s>y"
    with pytest.raises(InvalidRequest, match="placed 1 image"):
        expand_images("x<s>y", images)
    with pytest.raises(InvalidRequest, match="placed 3 image"):
        expand_images("<s><s><s>", images, some=True)
