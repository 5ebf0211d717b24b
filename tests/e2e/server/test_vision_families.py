"""The vision families beside llava (tests/vision_families.py) through a real `mlxd serve`
and `mlxd run`: two differently sized images in one message answer from the openai client,
and `mlxd run --json --image A --image B` gives the server's content and prompt tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server.serverproc import ServerProcess
from tests.e2e.server.vision_helpers import (
    ask,
    data_url,
    image_message,
    openai_client,
    run_json_equals,
    serving,
)
from tests.vision_checkpoints import png_bytes
from tests.vision_families import FAMILIES, make_family_checkpoint


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, ServerProcess]]:
    model = make_family_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    with serving(model, tmp_path_factory.mktemp("home")) as srv:
        yield model, srv


def test_two_sized_images_answer_and_run_json_equals_the_server(
    served: tuple[Path, ServerProcess], tmp_path: Path
) -> None:
    model, server = served
    wide, tall = tmp_path / "wide.png", tmp_path / "tall.png"
    wide.write_bytes(png_bytes(3, 64, 24))
    tall.write_bytes(png_bytes(4, 30, 40))
    urls = (data_url(wide.read_bytes()), data_url(tall.read_bytes()))
    reply = ask(openai_client(server), [image_message(*urls)])
    assert reply.choices[0].message.content and reply.usage is not None
    run_json_equals(reply, model, [wide, tall], server.env)
