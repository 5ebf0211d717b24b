"""The vision families beside llava (tests/vision_families.py) through a real `mlxd serve`
and `mlxd run`: two differently sized images in one message answer from the openai client,
and `mlxd run --json --image A --image B` gives the server's content and prompt tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd
from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.e2e.server.test_vision import QUESTION, data_url, image_message
from tests.vision_checkpoints import png_bytes
from tests.vision_families import FAMILIES, make_family_checkpoint


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, ServerProcess]]:
    model = make_family_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    srv = launch(["--model", str(model)], server_env(tmp_path_factory.mktemp("home")))
    yield model, srv
    srv.stop()


def test_two_sized_images_answer_and_run_json_equals_the_server(
    served: tuple[Path, ServerProcess], tmp_path: Path
) -> None:
    model, server = served
    wide, tall = tmp_path / "wide.png", tmp_path / "tall.png"
    wide.write_bytes(png_bytes(3, 64, 24))
    tall.write_bytes(png_bytes(4, 30, 40))
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    urls = (data_url(wide.read_bytes()), data_url(tall.read_bytes()))
    reply = client.chat.completions.create(
        model="default", messages=[image_message(*urls)], max_tokens=12, temperature=0
    )
    assert reply.choices[0].message.content and reply.usage is not None
    proc = run_mlxd(
        "run", str(model), "--image", str(wide), "--image", str(tall), QUESTION,
        "--max-tokens", "12", "--temperature", "0", "--json", env=server.env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["content"] == reply.choices[0].message.content
    assert body["usage"]["prompt_tokens"] == reply.usage.prompt_tokens
