"""A "scripted" tiny MLX checkpoint: greedy decoding emits a chosen sequence of text chunks.

Real weights, real forward pass, known output. How the weights do it:
  - every script chunk is one token (an existing vocabulary entry such as "<think>", or an
    added token), so each chunk is a distinct token id;
  - embeddings are the identity (hidden_size >= vocabulary), and the attention and MLP output
    projections are zero, so the residual stream at each position is the one-hot current token;
  - the (untied) lm_head maps each script token to the next chunk, the last chunk to the EOS
    token, and every other token (e.g. the end of any prompt) to the first chunk.
So, whatever the prompt, greedy decoding emits the script and then EOS ("<|im_end|>").
A prompt that already ends in a script chunk (a template that opens "<think>") continues
the script from there.

    path = make_scripted_checkpoint(tmp / "scripted", ["<think>", "Let me see.", "</think>",
                                                       "Paris."])

The tokenizer is the one tests/checkpoints.py trains, plus the added chunks, with the same
ChatML template (Hermes <tool_call>, <think>), so it exercises the same detection paths.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.checkpoints import CHATML_TEMPLATE, SPECIAL_TOKENS, train_tokenizer

EOS = "<|im_end|>"

# A ready-made script: reasoning, answer text, then a Hermes tool call. Through the chat layer
# (with tools) it gives ReasoningDelta("Let me see."), TextDelta("The answer is"),
# ToolCall(get_weather, {"city": "Paris"}) and FinishEvent(tool_calls); without tools the call
# is text.
WEATHER_CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
WEATHER_SCRIPT = (
    "<think>", "Let me see.", "</think>", "The answer", " is", "<tool_call>", WEATHER_CALL,
    "</tool_call>",
)  # fmt: skip


def make_scripted_checkpoint(
    path: Path,
    script: Sequence[str],
    template: str | None = CHATML_TEMPLATE,
    successors: Mapping[str, str] | None = None,
    special: Sequence[str] | None = None,
) -> Path:
    """Write a llama checkpoint whose greedy output is "".join(script) then EOS.

    Chunks must be distinct, non-empty strings. `successors` overrides which chunk follows
    a chunk (a loop: a model that reasons forever). `special` replaces the vocabulary's
    special tokens (tests/checkpoints.SPECIAL_TOKENS; it must hold EOS). Returns `path`.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    if len(set(script)) != len(script) or not all(script):
        raise ValueError("script chunks must be distinct non-empty strings")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    ids, vocab_size, eos_id = _write_tokenizer(path, script, template, special)
    hidden = -(-vocab_size // 64) * 64  # room for a one-hot per token, heads divide it
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": 1,
        "intermediate_size": 16,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "eos_token_id": eos_id,
    }
    skip = ("architectures", "torch_dtype", "eos_token_id")
    model = llama.Model(llama.ModelArgs(**{k: v for k, v in config.items() if k not in skip}))
    weights = {k: mx.zeros(v.shape) for k, v in tree_flatten(model.parameters())}
    for k in weights:
        if "norm" in k:
            weights[k] = mx.ones(weights[k].shape)
    weights["model.embed_tokens.weight"] = mx.eye(vocab_size, hidden)
    by_chunk = dict(zip(script, ids, strict=True))
    jumps = {by_chunk[a]: by_chunk[b] for a, b in (successors or {}).items()}
    weights["lm_head.weight"] = _successor_matrix(ids, vocab_size, hidden, eos_id, jumps)
    model.load_weights(list(weights.items()))
    mx.eval(model.parameters())
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    return path


def _successor_matrix(
    ids: list[int], vocab: int, hidden: int, eos_id: int, jumps: Mapping[int, int]
):
    import mlx.core as mx
    import numpy as np

    succ = np.full(vocab, ids[0])  # any other token: start the script
    for cur, nxt in zip(ids, [*ids[1:], eos_id], strict=True):
        succ[cur] = jumps.get(cur, nxt)
    w = np.zeros((vocab, hidden), dtype=np.float32)
    w[succ, np.arange(vocab)] = 1.0  # logits[v] = sum_t w[v, t] * onehot(t)
    return mx.array(w)


def _write_tokenizer(
    path: Path, script: Sequence[str], template: str | None, special: Sequence[str] | None
) -> tuple[list[int], int, int]:
    """The shared BPE tokenizer plus one added token per chunk not already in the vocab."""
    from tokenizers import AddedToken

    special = list(SPECIAL_TOKENS if special is None else special)
    tok = train_tokenizer(special=special)
    vocab = tok.get_vocab()
    new = [c for c in script if c not in vocab]
    tok.add_tokens([AddedToken(c, normalized=False, special=False) for c in new])
    tok.save(str(path / "tokenizer.json"))
    config: dict = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": EOS,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 4096,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {"content": t, "special": True} for t in special
        },
    }
    if template:
        config["chat_template"] = template
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    ids = [tok.token_to_id(c) for c in script]
    return ids, tok.get_vocab_size(), tok.token_to_id(EOS)
