"""Tiny random-weight MLX checkpoints for tests: real safetensors, a real BPE tokenizer
trained with `tokenizers`, real chat templates. Built in milliseconds, never downloaded.

make_checkpoint(path, kind) writes one of:
  "chat"     llama, ChatML template that supports <think> and tools (Hermes <tool_call>)
  "base"     llama, no chat template
  "quant"    like "chat", weights 4-bit affine-quantized (group 32)
  "small"    like "chat" but ~0.25M parameters (benchmarks: per-step overhead dominates)
  "big"      like "chat" but ~29M parameters (benchmarks: compute dominates)
  "thinking" llama, a template that opens <think> in the generation prompt and drops the
             reasoning from history (as DeepSeek-R1 / Qwen3 thinking templates do)
  "sliding"  gemma3_text: two sliding-window layers (window SLIDING_WINDOW, a rotating
             cache) per global layer, ChatML template
  "hybrid"   lfm2: short-convolution layers (a recurrent ArraysCache) and attention layers
  "gated"    qwen3_next: gated delta-net layers (recurrent) and attention layers, dense MLPs
  "gated_moe" like "gated" with a sparse MoE block (2 experts, a shared one) in every layer
  "plain"    llama, a ChatML template without tools and no tool or think tokens (like
             SmolLM2's): a model with no tool-call format and no reasoning markers
`dtype` ("float32", "float16", "bfloat16") is the weights' type; tests use float32.
`size` ("tiny", "small", "medium", "big", "long", "long2", "xl", "xxl") overrides the kind's
size (benchmarks use bigger models); `head_dim` sets the attention heads' width (llama kinds;
quantized KV needs a multiple of its group size, 32 or more); `window` is the context window
(long-prompt tests: 32768).
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
]

CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions. Signatures:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n"
    'Return each call as <tool_call>{"name": ..., "arguments": ...}</tool_call>'
    "<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and tools %}{% continue %}{% endif %}"
    "{% if message.role == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}{% endif %}"
    "{% if message.tool_calls %}{% for tc in message.tool_calls %}"
    '<tool_call>\n{"name": "{{ tc.function.name }}", "arguments": '
    "{{ tc.function.arguments if tc.function.arguments is string "
    "else tc.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)

# History drops the reasoning (everything up to </think>); the generation prompt opens it.
THINKING_TEMPLATE = (
    "{% for message in messages %}"
    "{% set content = message.content if message.content is string else '' %}"
    "{% if message.role == 'assistant' and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "<|im_start|>{{ message.role }}\n{{ content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)

# ChatML without tools (SmolLM2-like): the template never renders them.
PLAIN_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PLAIN_ABSENT = ("<tool_call>", "</tool_call>", "<think>", "</think>")  # not in "plain"

SLIDING_WINDOW = 16  # smaller than the tests' prompts: the rotating cache wraps

_CORPUS = """
The capital of France is Paris. The quick brown fox jumps over the lazy dog.
Hello, how are you today? I am fine, thank you. What is the weather like?
Machine learning models generate text one token at a time. Numbers: 0 1 2 3 4 5 6 7 8 9.
def add(a, b): return a + b  # code { "name": "get_weather", "arguments": {"city": "Paris"} }
Unicode: café naïve résumé 日本語 😀 — “quotes” and ‘apostrophes’.
"""

SIZES = {
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "small": dict(
        hidden_size=96,
        num_hidden_layers=2,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "medium": dict(
        hidden_size=256,
        num_hidden_layers=4,
        intermediate_size=768,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "big": dict(
        hidden_size=512,
        num_hidden_layers=9,
        intermediate_size=1536,
        num_attention_heads=8,
        num_key_value_heads=4,
    ),
    # One layer: prefill evaluates only the KV cache, which needs no attention, so a 16k-token
    # prompt costs ~0.1 s on CPU while its chunks and steps are the real ones (long-prompt tests).
    "long": dict(
        hidden_size=32,
        num_hidden_layers=1,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
    ),
    # Two layers: the first one's attention runs over the whole prompt (~15 s for 16k tokens
    # on 2 CPU cores), a long prompt whose cost grows with its length (benchmarks).
    "long2": dict(
        hidden_size=16,
        num_hidden_layers=2,
        intermediate_size=32,
        num_attention_heads=1,
        num_key_value_heads=1,
    ),
    "xl": dict(  # ~93M parameters: distributed_bench, where matmuls must outweigh the ring
        hidden_size=1024,
        num_hidden_layers=8,
        intermediate_size=2816,
        num_attention_heads=16,
        num_key_value_heads=8,
    ),
    "xxl": dict(  # ~380M parameters (1.5 GB float32): distributed_bench, decode compute-bound
        hidden_size=2048,
        num_hidden_layers=8,
        intermediate_size=5632,
        num_attention_heads=16,
        num_key_value_heads=8,
    ),
}


def train_tokenizer(vocab_size: int = 512, special: list[str] | None = None):
    """A byte-level BPE tokenizer (like GPT-2/SmolLM2) trained on a small corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS if special is None else special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 20, trainer=trainer)
    return tok


def write_tokenizer(
    path: Path,
    template: str | None,
    vocab_size: int = 512,
    special: list[str] | None = None,
    window: int = 2048,
) -> int:
    """Write tokenizer.json + tokenizer_config.json; return the vocabulary size."""
    special = SPECIAL_TOKENS if special is None else special
    tok = train_tokenizer(vocab_size, special)
    tok.save(str(path / "tokenizer.json"))
    config: dict = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>" if template else "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": window,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {"content": t, "special": True} for t in special
        },
    }
    if template:
        config["chat_template"] = template
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return tok.get_vocab_size()


def make_checkpoint(
    path: Path,
    kind: str = "chat",
    seed: int = 0,
    dtype: str = "float32",
    size: str | None = None,
    vocab_size: int = 512,
    head_dim: int | None = None,
    window: int = 2048,
) -> Path:
    import importlib

    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    template = _TEMPLATES.get(kind, CHATML_TEMPLATE)
    special = [t for t in SPECIAL_TOKENS if t not in PLAIN_ABSENT] if kind == "plain" else None
    vocab = write_tokenizer(path, template, vocab_size, special, window)
    dims = SIZES[size or (kind if kind in SIZES else "tiny")]
    model_type, arch = _ARCHS.get(kind, _ARCHS["chat"])
    config: dict = {
        "model_type": model_type,
        **arch(dims),
        "vocab_size": vocab,
        "max_position_embeddings": window,
        "tie_word_embeddings": True,
        "torch_dtype": dtype,
        "eos_token_id": _eos_id(path, template),
    }
    if "text_config" in config:  # a wrapper's text model (llama4) reads its own fields
        config["text_config"].update(vocab_size=vocab, max_position_embeddings=window)
    if head_dim is not None:  # wider heads than hidden_size / heads (quantized KV groups)
        config["head_dim"] = head_dim
    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    # Larger-than-default init so that greedy output varies with the prompt.
    params = tree_flatten(model.parameters())
    model.load_weights(
        [(k, mx.random.normal(v.shape) * 0.5) if "norm" not in k else (k, v) for k, v in params]
    )
    if dtype != "float32":
        model.set_dtype(getattr(mx, dtype))
    if kind == "quant":
        nn.quantize(model, group_size=32, bits=4)
        config["quantization"] = {"group_size": 32, "bits": 4, "mode": "affine"}
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    return path


def _llama(d: dict) -> dict:
    return {"architectures": ["LlamaForCausalLM"], **d, "rms_norm_eps": 1e-5, "rope_theta": 1e4}


def _gemma3_text(d: dict) -> dict:
    head_dim = d["hidden_size"] // d["num_attention_heads"]
    return {
        "architectures": ["Gemma3ForCausalLM"],
        **d,
        "num_hidden_layers": 3 * max(1, d["num_hidden_layers"] // 2),  # sliding, sliding, global
        "head_dim": head_dim,
        "query_pre_attn_scalar": head_dim,
        "sliding_window": SLIDING_WINDOW,
        "sliding_window_pattern": 3,
        "rms_norm_eps": 1e-6,
    }


def _lfm2(d: dict) -> dict:
    layers = 2 * d["num_hidden_layers"]
    return {
        "architectures": ["Lfm2ForCausalLM"],
        "hidden_size": d["hidden_size"],
        "num_hidden_layers": layers,
        "num_attention_heads": d["num_attention_heads"],
        "num_key_value_heads": d["num_key_value_heads"],
        "norm_eps": 1e-5,
        "conv_bias": False,
        "conv_L_cache": 3,
        "block_dim": d["hidden_size"],
        "block_ff_dim": d["intermediate_size"],
        "block_multiple_of": 16,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "full_attn_idxs": list(range(1, layers, 2)),  # conv, attention, conv, attention, ...
    }


def _qwen3_next(d: dict) -> dict:
    heads, hidden = d["num_attention_heads"], d["hidden_size"]
    layers = 2 * d["num_hidden_layers"]
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        **d,
        "num_hidden_layers": layers,
        "head_dim": hidden // heads,
        "linear_num_value_heads": heads,
        "linear_num_key_heads": d["num_key_value_heads"],
        "linear_key_head_dim": hidden // heads,
        "linear_value_head_dim": hidden // heads,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": 2,  # delta-net, attention, delta-net, attention, ...
        "num_experts": 0,
        "num_experts_per_tok": 0,
        "decoder_sparse_step": 1,
        "shared_expert_intermediate_size": 0,
        "mlp_only_layers": list(range(layers)),
        "moe_intermediate_size": 0,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e4,
        "partial_rotary_factor": 0.5,
    }


def _qwen3_next_moe(d: dict) -> dict:
    """qwen3_next with a sparse MoE block in every layer (2 experts, one shared)."""
    return {
        **_qwen3_next(d),
        "num_experts": 2,
        "num_experts_per_tok": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": d["intermediate_size"] // 2,
        "shared_expert_intermediate_size": d["intermediate_size"] // 2,
        "norm_topk_prob": True,
    }


def _llama4(d: dict) -> dict:
    """llama4's text model: ChunkedKVCache on three layers of four (chunks of 8 tokens, so
    short prompts cross them), a global KVCache on the fourth; experts on the fourth too."""
    text = {
        **d,
        "num_hidden_layers": 4,
        "head_dim": d["hidden_size"] // d["num_attention_heads"],
        "intermediate_size_mlp": d["intermediate_size"],
        "attention_bias": False,
        "attention_chunk_size": 8,
        "interleave_moe_layer_step": 4,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "rms_norm_eps": 1e-5,
        "rope_scaling": None,
        "rope_theta": 1e4,
        "use_qk_norm": True,
        "model_type": "llama4_text",
    }
    return {"architectures": ["Llama4ForConditionalGeneration"], "text_config": text}


_ARCHS = {
    "chat": ("llama", _llama),
    "sliding": ("gemma3_text", _gemma3_text),
    "hybrid": ("lfm2", _lfm2),
    "gated": ("qwen3_next", _qwen3_next),
    "gated_moe": ("qwen3_next", _qwen3_next_moe),
    "chunked": ("llama4", _llama4),
}
_TEMPLATES = {"base": None, "thinking": THINKING_TEMPLATE, "plain": PLAIN_TEMPLATE}


def _eos_id(path: Path, template: str | None) -> int:
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    return vocab["<|im_end|>" if template else "<|endoftext|>"]


def make_hf_checkpoint(
    path: Path, dtype: str = "bfloat16", seed: int = 0, size: str | None = None
) -> Path:
    """A tiny llama checkpoint laid out as transformers saves one: weights in `dtype`, in two
    shards with model.safetensors.index.json, "pt" metadata, the rotary inv_freq buffers
    mlx-lm's sanitize drops, config.json with torch_dtype; tokenizer as make_checkpoint's."""
    import mlx.core as mx

    make_checkpoint(path, "chat", seed=seed, dtype=dtype, size=size)
    weights = mx.load(str(path / "model.safetensors"))
    assert isinstance(weights, dict)
    (path / "model.safetensors").unlink()
    config = json.loads((path / "config.json").read_text())
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    for layer in range(config["num_hidden_layers"]):
        key = f"model.layers.{layer}.self_attn.rotary_emb.inv_freq"
        weights[key] = mx.arange(head_dim // 2, dtype=mx.float32)
    names = sorted(weights)
    shards = {f"model-0000{i + 1}-of-00002.safetensors": names[i::2] for i in range(2)}
    weight_map = {}
    for file, keys in shards.items():
        mx.save_safetensors(str(path / file), {k: weights[k] for k in keys}, {"format": "pt"})
        weight_map.update(dict.fromkeys(keys, file))
    index = {"metadata": {"total_size": sum(v.nbytes for v in weights.values())},
             "weight_map": weight_map}  # fmt: skip
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    config |= {"torch_dtype": dtype, "transformers_version": "4.57.0"}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path
