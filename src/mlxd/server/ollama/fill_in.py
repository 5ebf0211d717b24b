"""Fill-in-the-middle for /api/generate's `suffix`: the prompt a code model was trained on,
from the FIM tokens its vocabulary holds.

Ollama fills `suffix` through its Go template; Hugging Face chat templates have no such slot,
so mlxd recognises the FIM spellings of the families that ship them (as llama.cpp's /infill
does) and answers 400 for a model without one. The prompt is raw text: the FIM tokens are
control tokens, and the prefix and suffix are encoded as in `raw` (a prefix that spells a FIM
token becomes that token, as with `raw`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxd.errors import InvalidRequest
from mlxd.types import Tokenizer


@dataclass(frozen=True, slots=True)
class FillIn:
    """One family's FIM spelling: `prefix`, `suffix`, `middle` tokens; `suffix_first` for
    the suffix-prefix-middle order (Codestral)."""

    prefix: str
    suffix: str
    middle: str = ""
    suffix_first: bool = False

    def tokens(self) -> tuple[str, ...]:
        return tuple(t for t in (self.prefix, self.suffix, self.middle) if t)

    def prompt(self, before: str, after: str) -> str:
        if self.suffix_first:
            return f"{self.suffix}{after}{self.prefix}{before}{self.middle}"
        return f"{self.prefix}{before}{self.suffix}{after}{self.middle}"


FILL_INS = (
    FillIn("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5/3-Coder, CodeGemma
    FillIn("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder 1/2, Granite code
    FillIn("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
    FillIn("[PREFIX]", "[SUFFIX]", suffix_first=True),  # Codestral
)


def fill_in_of(tokenizer: Tokenizer) -> FillIn | None:
    """The FIM spelling whose every token the vocabulary holds, or None."""
    vocab = tokenizer.get_vocab()
    return next((f for f in FILL_INS if all(t in vocab for t in f.tokens())), None)


def fill_in_prompt(tokenizer: Tokenizer, before: str, after: str) -> str:
    """The raw prompt that asks the model for the text between `before` and `after`.
    Raises InvalidRequest (param `suffix`) for a model without FIM tokens."""
    fill_in = fill_in_of(tokenizer)
    if fill_in is None:
        raise InvalidRequest(
            "suffix needs a model trained for fill-in-the-middle (its vocabulary has no "
            "FIM tokens such as <|fim_prefix|>)",
            param="suffix",
        )
    return fill_in.prompt(before, after)
