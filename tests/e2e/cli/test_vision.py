"""Images from the terminal: `mlxd run MODEL --image PATH "question"` and the chat's
`/image PATH`, on the tiny llava checkpoint; bad images are one line and a non-zero exit
(run) or one line and the chat goes on (chat)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd
from tests.vision_checkpoints import png_bytes


@pytest.fixture
def pictures(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "first.png", tmp_path / "second.png"
    first.write_bytes(png_bytes(0))
    second.write_bytes(png_bytes(1))
    return first, second


def run_json(model: Path, env: dict[str, str], *args: str) -> dict:
    proc = run_mlxd("run", str(model), *args, "--max-tokens", "10", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return one_json_line(proc.stdout)


def test_run_image_answers_depend_on_the_image(
    tiny_vision_model: Path, cli_env: dict[str, str], pictures: tuple[Path, Path]
) -> None:
    first, second = pictures
    a = run_json(tiny_vision_model, cli_env, "--image", str(first), "What is this?")
    b = run_json(tiny_vision_model, cli_env, "--image", str(second), "What is this?")
    both = run_json(
        tiny_vision_model, cli_env, "--image", str(first), "--image", str(second), "Compare."
    )
    assert a["content"] != b["content"]
    assert set(a) == set(run_json(tiny_vision_model, cli_env, "What is this?"))  # same shape
    assert both["usage"]["prompt_tokens"] > a["usage"]["prompt_tokens"]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (png_bytes(0)[:300], "truncated"),
        (b"plain text", "not an image"),
        (None, "cannot read"),
    ],
    ids=["truncated", "not-an-image", "missing-file"],
)
def test_run_bad_image_is_one_line_and_exit_2(
    tiny_vision_model: Path, cli_env: dict[str, str], tmp_path: Path, content, why: str
) -> None:
    path = tmp_path / "bad.png"
    if content is not None:
        path.write_bytes(content)
    proc = run_mlxd("run", str(tiny_vision_model), "--image", str(path), "Hi", env=cli_env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlxd: error:") and why in lines[0], lines
    assert proc.stdout == ""


def test_run_image_to_a_text_model_is_one_json_error(
    tiny_chat_model: Path, cli_env: dict[str, str], pictures: tuple[Path, Path]
) -> None:
    proc = run_mlxd(
        "run", str(tiny_chat_model), "--image", str(pictures[0]), "Hi", "--json", env=cli_env
    )
    assert proc.returncode == 2
    error = json.loads(proc.stderr)["error"]
    assert "text only" in error["message"]
    assert error["param"] == "messages[0].content[0].image_url"


def test_chat_image_command_attaches_to_the_next_message(
    tiny_vision_model: Path, cli_env: dict[str, str], pictures: tuple[Path, Path], tmp_path: Path
) -> None:
    first, _ = pictures
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a picture")
    script = (
        f"/image {bad}\n"  # refused at once: one line, the chat goes on
        f"/image {first}\n"
        "What is this?\n"
        "And now?\n"  # no image of its own; the first one stays in the history
        "/stats\n"
    )
    proc = run_mlxd(
        "chat", str(tiny_vision_model), "--max-tokens", "6", "--temperature", "0",
        env=cli_env, input=script,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mlxd: error:")]
    assert len(errors) == 1 and "not an image" in errors[0], proc.stderr
    assert "Image attached to your next message (1 image)." in proc.stdout
    assert "session: 2 answers" in proc.stdout
    alone = run_mlxd(
        "run", str(tiny_vision_model), "--image", str(first), "What is this?",
        "--max-tokens", "6", "--temperature", "0", env=cli_env,
    )  # fmt: skip
    assert alone.stdout.strip() and alone.stdout.strip() in proc.stdout
