"""chat.prompt_budget on real tokenizers: the token bound it refuses by is a lower bound of
the real count for every kind of text (so a prompt that fits is never refused), a prompt past
the window is refused before it is tokenized, and large prompts tokenize in turns."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlxd.backend.mlx_lm.compat import load_tokenizer
from mlxd.chat import prompt_budget
from mlxd.chat.builder import build_chat_prompt, build_text_prompt
from mlxd.chat.prompt_budget import least_tokens
from mlxd.errors import ContextOverflow
from tests.integration.backend.tokenizer.tokenizer_variants import make_variant

rng = random.Random(0)
TEXTS = {
    "words": " ".join(rng.choice(["the", "quick", "brown", "fox", "weather"]) for _ in range(4000)),
    "letters": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(20000)),
    "one_letter": "a" * 20000,
    "digits": "".join(rng.choice("0123456789") for _ in range(20000)),
    "spaces": " " * 20000 + "x" + "\n" * 5000,
    "cjk": "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(5000)),
    "emoji": "\U0001f600\U0001f680" * 3000,
    "control_text": "<|im_end|><|im_start|>system\n" * 500,
    "punctuation": "-=*#" * 5000,
}


@pytest.fixture(scope="module", params=["chat", "spm", "hybrid", "sliding"])
def tokenizer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    chat: Path = request.getfixturevalue("tiny_chat_model")
    if request.param == "spm":
        return load_tokenizer(make_variant(chat, tmp_path_factory.mktemp("spm"), "spm"))
    return load_tokenizer(request.getfixturevalue(f"tiny_{request.param}_model"))


@pytest.mark.parametrize("kind", sorted(TEXTS))
def test_the_bound_never_exceeds_the_real_count(tokenizer: Any, kind: str) -> None:
    text = TEXTS[kind]
    assert least_tokens(tokenizer, text) <= len(tokenizer.encode(text, add_special_tokens=False))


def test_a_prompt_past_the_window_is_refused_before_tokenizing(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = TEXTS["words"] * 100  # ~2 MB
    window = max(2, least_tokens(tokenizer, big) // 2)  # a window its bound reaches
    encoded: list[int] = []
    inner = tokenizer._tokenizer
    encode = inner.encode
    monkeypatch.setattr(inner, "encode", lambda t, **kw: encoded.append(len(t)) or encode(t, **kw))
    with pytest.raises(
        ContextOverflow, match=rf"at least \d+ tokens .* context window is {window}"
    ):
        build_chat_prompt(tokenizer, [{"role": "user", "content": big}], window=window)
    with pytest.raises(ContextOverflow, match=f"context window is {window}") as refused:
        build_text_prompt(tokenizer, big, window=window)
    assert refused.value.param == "prompt"
    assert not [n for n in encoded if n > 100_000]  # the big text never reached the tokenizer
    small = [{"role": "user", "content": TEXTS["words"]}]
    fits = build_chat_prompt(tokenizer, small, window=1 << 20)
    assert fits.token_ids == build_chat_prompt(tokenizer, small).token_ids


def test_large_prompts_tokenize_in_turns(
    chat_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLXD_TOKENIZE_BYTES", str(prompt_budget.LARGE_PROMPT_BYTES * 3))
    text = "x" * (2 * prompt_budget.LARGE_PROMPT_BYTES)  # two of these never fit together
    inside, most = [0], [0]
    lock = threading.Lock()
    inner = chat_tokenizer._tokenizer
    encode = inner.encode

    def counting(t: str, **kw: Any) -> list[int]:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # overlap the threads if nothing orders them
        try:
            return list(encode(t, **kw))
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(inner, "encode", counting)
    threads = [
        threading.Thread(target=build_text_prompt, args=(chat_tokenizer, text)) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 1


@pytest.mark.demo
@pytest.mark.parametrize("kind", sorted(TEXTS))
def test_the_bound_holds_on_the_demo_model(demo_model: Any, kind: str) -> None:
    tokenizer = load_tokenizer(demo_model.path)
    text = TEXTS[kind]
    assert least_tokens(tokenizer, text) <= len(tokenizer.encode(text, add_special_tokens=False))
