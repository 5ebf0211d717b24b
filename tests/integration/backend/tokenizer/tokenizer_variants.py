"""Tokenizer-only checkpoints (no weights) that exercise what transformers does with the
tokenizer files beyond the plain tiny checkpoints: tokens declared only in the config, special
tokens that are plain vocabulary words, model-specific and extra special tokens, the legacy
config forms, template files, a tool format mlx-lm has a parser for, and an SPM-style tokenizer
with byte fallback (mlx-lm's SPM streaming detokenizer)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.checkpoints import _CORPUS

VARIANTS = ("declared", "legacy", "template_files", "coder_tools", "spm", "mlx_community")

CODER_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if tools %}<tool_call>\n<function=name>\n<parameter=x>\n</parameter>\n</function>\n"
    "</tool_call>{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_variant(chat: Path, dest: Path, name: str) -> Path:
    """A copy of the tiny chat checkpoint's tokenizer files and config, edited as `name`."""
    dest.mkdir(parents=True, exist_ok=True)
    for file in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(chat / file, dest / file)
    config = json.loads((dest / "tokenizer_config.json").read_text())
    EDITS[name](dest, config)
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return dest


def _declared(dest: Path, config: dict[str, Any]) -> None:
    vocab = json.loads((dest / "tokenizer.json").read_text())["model"]["vocab"]
    word = next(t for t in vocab if t.isalpha() and len(t) >= 4)  # a plain vocabulary word
    decoder = config["added_tokens_decoder"]
    decoder[str(len(vocab) + 40)] = {"content": "<|extra|>", "special": True}
    decoder["3"] = {"content": "<think>", "special": False, "normalized": True, "lstrip": True}
    config.update(pad_token=word, image_token="<image>", extra_special_tokens=["<|tool|>"])


def _legacy(dest: Path, config: dict[str, Any]) -> None:
    del config["added_tokens_decoder"]
    config["bos_token"] = {"__type": "AddedToken", "content": "<|im_start|>", "special": True}
    config["additional_special_tokens"] = ["<|extra|>", "<|im_end|>"]


def _template_files(dest: Path, config: dict[str, Any]) -> None:
    (dest / "chat_template.jinja").write_text(config.pop("chat_template"))
    (dest / "additional_chat_templates").mkdir()
    (dest / "additional_chat_templates" / "tool_use.jinja").write_text(CODER_TEMPLATE)


def _coder_tools(dest: Path, config: dict[str, Any]) -> None:
    config["chat_template"] = CODER_TEMPLATE


def _spm(dest: Path, config: dict[str, Any]) -> None:
    """A Llama-2-style tokenizer: SPM normalizer/decoder, byte fallback, BOS added."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
    )
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False)
    tok.train_from_iterator([_CORPUS.replace("日本語", "")] * 20, trainer=trainer)
    data = json.loads(tok.to_str())
    learned = sorted(data["model"]["vocab"].items(), key=lambda item: item[1])[len(specials) :]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    order = specials + byte_tokens + [token for token, _ in learned]
    data["model"].update(vocab={t: i for i, t in enumerate(order)}, byte_fallback=True)
    data["model"]["fuse_unk"] = True
    data["decoder"] = json.loads(
        decoders.Sequence(
            [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
             decoders.Strip(" ", 1, 0)]
        ).__getstate__()
    )  # fmt: skip
    data["post_processor"] = json.loads(
        processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
        ).__getstate__()
    )
    (dest / "tokenizer.json").write_text(json.dumps(data))
    config.clear()
    config.update(
        tokenizer_class="PreTrainedTokenizerFast", bos_token="<s>", eos_token="</s>",
        unk_token="<unk>", model_max_length=4096, chat_template="{{ bos_token }}"
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
        added_tokens_decoder={str(i): {"content": t, "special": True}
                              for i, t in enumerate(specials)},
    )  # fmt: skip
    model = json.loads((dest / "config.json").read_text())
    model.update(vocab_size=len(order), eos_token_id=2, bos_token_id=1)
    (dest / "config.json").write_text(json.dumps(model))


def _mlx_community(dest: Path, config: dict[str, Any]) -> None:
    """The files mlx-community conversions ship beside tokenizer.json (transformers'
    save_pretrained): added_tokens.json and special_tokens_map.json restating what
    tokenizer.json and the config already hold, and the BPE model as vocab.json/merges.txt."""
    data = json.loads((dest / "tokenizer.json").read_text())
    added = {t["content"]: t["id"] for t in data["added_tokens"]}
    (dest / "added_tokens.json").write_text(json.dumps(added, indent=2))
    names = ("bos_token", "eos_token", "unk_token", "pad_token")
    specials = {n: config[n] for n in names if config.get(n) is not None}
    (dest / "special_tokens_map.json").write_text(json.dumps(specials, indent=2))
    (dest / "vocab.json").write_text(json.dumps(data["model"]["vocab"]))
    merges = data["model"]["merges"]
    lines = [m if isinstance(m, str) else " ".join(m) for m in merges]
    (dest / "merges.txt").write_text("#version: 0.2\n" + "\n".join(lines) + "\n")


EDITS: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    "declared": _declared,
    "legacy": _legacy,
    "template_files": _template_files,
    "coder_tools": _coder_tools,
    "spm": _spm,
    "mlx_community": _mlx_community,
}
