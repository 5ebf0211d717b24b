"""Images through a real `mlxd serve` on the tiny llava checkpoint, from the openai client:
image turns (streamed and not, multi-turn), CLI parity, and every bad input refused with a
400 that says why, each followed by a request that works."""

from __future__ import annotations

import functools
import http.server
import io
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.e2e.server.vision_helpers import (
    ask,
    data_url,
    home_with_text_model,
    image_message,
    openai_client,
    run_json_equals,
    serving,
)
from tests.vision_checkpoints import png_bytes


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, tiny_chat_model: Path) -> Path:
    return home_with_text_model(tmp_path_factory, tiny_chat_model, "vision-home")


@pytest.fixture(scope="module")
def server(tiny_vision_model: Path, home: Path) -> Iterator[ServerProcess]:
    with serving(tiny_vision_model, home) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai_client(server)


def post(server: ServerProcess, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    body = {"messages": messages, "max_tokens": 4, **extra}
    return httpx.post(server.base_url + "/chat/completions", json=body, timeout=60)


def test_image_turn_from_the_openai_client_streamed_and_not(client: openai.OpenAI) -> None:
    message = image_message(data_url(png_bytes(0)))
    reply = ask(client, [message])
    content = reply.choices[0].message.content
    assert content
    assert reply.usage.prompt_tokens > 4  # the image's positions count as prompt tokens
    chunks = list(
        client.chat.completions.create(
            model="default",
            messages=[message],
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == content
    assert chunks[-1].usage.prompt_tokens == reply.usage.prompt_tokens
    # The same picture again comes from the prefix cache.
    again = ask(client, [message])
    assert again.choices[0].message.content == content
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1


def test_different_images_give_different_answers(client: openai.OpenAI) -> None:
    answers = {
        ask(client, [image_message(data_url(png_bytes(seed)))]).choices[0].message.content
        for seed in (10, 11, 12)
    }
    assert len(answers) == 3


def test_multi_turn_with_an_image_in_the_history(client: openai.OpenAI) -> None:
    first = image_message(data_url(png_bytes(4)))
    reply = ask(client, [first]).choices[0].message.content
    history = [first, {"role": "assistant", "content": reply}]
    second = ask(client, [*history, {"role": "user", "content": "And its colours?"}])
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    other = ask(client, [image_message(data_url(png_bytes(5))), history[1],
                         {"role": "user", "content": "And its colours?"}])  # fmt: skip
    assert second.choices[0].message.content != other.choices[0].message.content


def test_run_json_equals_server_content_for_an_image_turn(
    client: openai.OpenAI, server: ServerProcess, tiny_vision_model: Path, tmp_path: Path
) -> None:
    picture = tmp_path / "picture.png"
    picture.write_bytes(png_bytes(7))
    reply = ask(client, [image_message(data_url(picture.read_bytes()))])
    body = run_json_equals(reply, tiny_vision_model, [picture], server.env)
    assert body["finish_reason"] == reply.choices[0].finish_reason


def _png_declaring(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" * 64)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def _tiff() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, format="TIFF")
    return out.getvalue()


GOOD = png_bytes(0)
BAD_IMAGES = {
    # A sound header, then pixel data scrambled (the IDAT chunk fails its checks).
    "corrupt": (
        data_url(GOOD[:60] + bytes(b ^ 0x5A for b in GOOD[60:-12]) + GOOD[-12:]),
        "corrupt",
    ),  # fmt: skip
    "truncated": (data_url(GOOD[: len(GOOD) // 2]), "truncated"),
    "not-an-image": (data_url(b"hello, world"), "not an image"),
    "unsupported-format": (data_url(_tiff(), "image/tiff"), "unsupported image format TIFF"),
    "bomb": (data_url(_png_declaring(30000, 30000)), "decompression bomb"),
    "huge-bomb": (data_url(_png_declaring(100000, 100000)), "decompression bomb"),
    "bad-base64": ("data:image/png;base64,!!!notbase64", "not valid base64"),
    "not-base64": ("data:image/png,rawbytes", "must be base64"),
    "remote-url": ("https://example.com/cat.png", "does not fetch"),
    "file-url": ("file:///etc/passwd", "must be a data: URL"),
}


@pytest.mark.parametrize("case", sorted(BAD_IMAGES))
def test_bad_image_is_a_400_and_the_next_request_works(server: ServerProcess, case: str) -> None:
    url, why = BAD_IMAGES[case]
    bad = post(server, [image_message(url)])
    assert bad.status_code == 400, bad.text
    error = bad.json()["error"]
    assert why in error["message"]
    assert error["param"].startswith("messages[0].content[0]")
    good = post(server, [image_message(data_url(GOOD))])
    assert good.status_code == 200, good.text


def test_too_many_images_is_a_400(server: ServerProcess) -> None:
    urls = [data_url(png_bytes(i)) for i in range(9)]  # MLXD_MAX_IMAGES: 8
    bad = post(server, [image_message(*urls)])
    assert bad.status_code == 400
    assert "too many images: 9" in bad.json()["error"]["message"]
    assert post(server, [image_message(*urls[:2])]).status_code == 200


def test_an_image_to_a_text_only_model_is_a_400(server: ServerProcess) -> None:
    bad = post(server, [image_message(data_url(GOOD))], model="tiny-text")
    assert bad.status_code == 400
    assert "text only" in bad.json()["error"]["message"]
    ok = post(server, [{"role": "user", "content": "Hi"}], model="tiny-text")
    assert ok.status_code == 200


def test_image_in_an_assistant_message_is_a_400(server: ServerProcess) -> None:
    turn = {"role": "assistant", "content": [{"type": "image_url",
                                              "image_url": {"url": data_url(GOOD)}}]}  # fmt: skip
    bad = post(server, [image_message(data_url(GOOD)), turn, {"role": "user", "content": "x"}])
    assert bad.status_code == 400
    assert "only user messages carry images" in bad.json()["error"]["message"]


@pytest.fixture
def picture_site(tmp_path: Path) -> Iterator[str]:
    """A loopback HTTP server holding picture.png."""
    (tmp_path / "picture.png").write_bytes(png_bytes(0))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{site.server_address[1]}"
    site.shutdown()


def test_allow_image_urls_fetches_http_images(
    tiny_vision_model: Path, home: Path, picture_site: str, client: openai.OpenAI
) -> None:
    srv = launch(["--model", str(tiny_vision_model), "--allow-image-urls"], server_env(home))
    try:
        fetched = post(srv, [image_message(f"{picture_site}/picture.png")], max_tokens=12)
        missing = post(srv, [image_message(f"{picture_site}/missing.png")])
    finally:
        srv.stop()
    assert fetched.status_code == 200, fetched.text
    inline = ask(client, [image_message(data_url(png_bytes(0)))])
    assert fetched.json()["choices"][0]["message"]["content"] == inline.choices[0].message.content
    assert missing.status_code == 400
    assert "cannot fetch" in missing.json()["error"]["message"]
