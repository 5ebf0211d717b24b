"""`mlxd run`'s rule for which positional is the model and where the prompt comes from."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mlxd.cli.run import Invocation, parse_positionals, read_prompt
from mlxd.errors import InvalidRequest, ModelNotFound


@pytest.fixture
def model_dir(isolated_home: Path) -> Path:
    d = isolated_home / "some-model"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


class Stdin(io.StringIO):
    def __init__(self, text: str, tty: bool) -> None:
        super().__init__(text)
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_model_then_prompt(model_dir: Path) -> None:
    inv = parse_positionals([str(model_dir), "hello", "there"], None)
    assert inv.model == str(model_dir) and inv.prompt_words == ("hello", "there")
    assert inv.model_ref is not None and inv.model_ref.path == model_dir.resolve()


def test_single_unknown_word_is_the_prompt(isolated_home: Path) -> None:
    assert parse_positionals(["hello"], None) == Invocation(None, ("hello",))


def test_spaces_or_dash_start_the_prompt(isolated_home: Path) -> None:
    assert parse_positionals(["what is 2+2?", "x"], None).model is None
    assert parse_positionals(["-", "summarize"], None) == Invocation(None, ("-", "summarize"))


def test_explicit_model_flag_makes_every_word_prompt(model_dir: Path) -> None:
    inv = parse_positionals([str(model_dir), "hi"], "other")
    assert inv.model == "other" and inv.prompt_words == (str(model_dir), "hi")


@pytest.mark.parametrize("words", [["nosuchmodel", "hi"], ["./nowhere"], ["org/absent"]])
def test_unknown_model_is_an_error(isolated_home: Path, words: list[str]) -> None:
    with pytest.raises(ModelNotFound):
        parse_positionals(words, None)


def test_read_prompt_sources() -> None:
    assert read_prompt(Invocation(None, ("a", "b")), Stdin("", tty=True)) == "a b"
    assert read_prompt(Invocation(None, ()), Stdin("", tty=True)) is None  # -> REPL
    assert read_prompt(Invocation(None, ()), Stdin("piped\n", tty=False)) == "piped"
    dash = Invocation(None, ("-", "summarize", "this"))
    assert read_prompt(dash, Stdin("notes\n", tty=False)) == "notes\n\nsummarize this"
    words = Invocation("m", ("explain",))
    assert read_prompt(words, Stdin("ignored", tty=False)) == "explain"
    with pytest.raises(InvalidRequest):
        read_prompt(Invocation(None, ("-",)), Stdin("  \n", tty=False))


def test_with_a_server_its_model_list_decides() -> None:
    """--server: the same rule, with the server's answer to GET /v1/models/NAME (a name, or
    ModelNotFound) in place of the store's."""

    def known_to_server(name: str) -> str:
        if name != "qwen3":
            raise ModelNotFound(f"model '{name}' is not known", param="model")
        return name

    inv = parse_positionals(["qwen3", "hi"], None, known_to_server)
    assert inv == Invocation("qwen3", ("hi",), model_ref="qwen3")
    assert parse_positionals(["hello"], None, known_to_server) == Invocation(None, ("hello",))
    with pytest.raises(ModelNotFound, match="quote the whole prompt"):
        parse_positionals(["qwen4", "hi"], None, known_to_server)
