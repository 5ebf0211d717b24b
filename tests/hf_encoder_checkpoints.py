"""Tiny random encoder checkpoints in Hugging Face's own key layout, for the families no
library class writes for us: RoBERTa (RobertaModel's keys) and nomic-bert (NomicBertModel's
keys and GPT-2-style config). Weights are numpy arrays saved as safetensors (torch is not
installed), so the tests' numpy reference forwards read exactly what mlxd loads.

make_roberta(path)  byte-level BPE with <s> ... </s>, <pad> = 1, positions from pad + 1
make_nomic(path)    WordPiece with [CLS] ... [SEP], rotary on half of each head, SwiGLU,
                    no biases, vocabulary padded to a multiple of 64, nomic's auto_map kept
Both: mean pooling and Normalize in the sentence-transformers files (as their models ship).
`weights(path)` reads a checkpoint back as numpy arrays.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.checkpoints import train_tokenizer
from tests.embedding_checkpoints import _sentence_transformers, _tokenizer_config
from tests.embedding_checkpoints import _wordpiece_tokenizer as wordpiece_tokenizer

HIDDEN, HEADS, LAYERS = 32, 4, 2
ROBERTA_SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's ids 0..4
ROBERTA_POSITIONS = 40  # pad id 1: 38 tokens fit
NOMIC_INNER, NOMIC_MLP = 100, 256  # nomic rounds n_inner up to a multiple of 256


def make_roberta(path: Path, seed: int = 0) -> Path:
    from tokenizers.processors import TemplateProcessing

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(300, ROBERTA_SPECIAL)
    tok.post_processor = TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    tok.save(str(path / "tokenizer.json"))
    _tokenizer_config(
        path, {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "cls_token": "<s>"}
    )
    vocab, inner = tok.get_vocab_size(), 64
    config = {
        "architectures": ["RobertaModel"],
        "model_type": "roberta",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": inner,
        "hidden_act": "gelu",
        "max_position_embeddings": ROBERTA_POSITIONS,
        "type_vocab_size": 1,
        "vocab_size": vocab,
        "layer_norm_eps": 1e-5,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "position_embedding_type": "absolute",
    }
    rng = np.random.default_rng(seed)
    w = _Weights(rng)
    w.dense("embeddings.word_embeddings", (vocab, HIDDEN), bias=False)
    w.dense("embeddings.position_embeddings", (ROBERTA_POSITIONS, HIDDEN), bias=False)
    w.dense("embeddings.token_type_embeddings", (1, HIDDEN), bias=False)
    w.norm("embeddings.LayerNorm")
    w.out["embeddings.position_ids"] = np.arange(ROBERTA_POSITIONS, dtype=np.int64)[None]
    for i in range(LAYERS):
        at = f"encoder.layer.{i}.attention"
        for name in ("query", "key", "value"):
            w.dense(f"{at}.self.{name}", (HIDDEN, HIDDEN))
        w.dense(f"{at}.output.dense", (HIDDEN, HIDDEN))
        w.norm(f"{at}.output.LayerNorm")
        w.dense(f"encoder.layer.{i}.intermediate.dense", (inner, HIDDEN))
        w.dense(f"encoder.layer.{i}.output.dense", (HIDDEN, inner))
        w.norm(f"encoder.layer.{i}.output.LayerNorm")
    w.dense("pooler.dense", (HIDDEN, HIDDEN))
    _write(path, config, w.out)
    return path


def nomic_config(vocab: int) -> dict:
    """A nomic-embed-text-v1.5 config.json at tiny sizes (its keys and switches)."""
    return {
        "architectures": ["NomicBertModel"],
        "model_type": "nomic_bert",
        "auto_map": {  # what nomic ships; mlxd never imports it
            "AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
            "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel",
        },
        "activation_function": "swiglu",
        "n_embd": HIDDEN,
        "n_head": HEADS,
        "n_layer": LAYERS,
        "n_inner": NOMIC_INNER,
        "n_positions": 128,
        "max_trained_positions": 2048,
        "layer_norm_epsilon": 1e-12,
        "vocab_size": vocab,
        "pad_vocab_size_multiple": 64,
        "type_vocab_size": 2,
        "rotary_emb_fraction": 0.5,
        "rotary_emb_base": 1000,
        "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None,
        "rotary_scaling_factor": None,
        "qkv_proj_bias": False,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "prenorm": False,
        "parallel_block": False,
        "causal": False,
        "use_rms_norm": False,
    }


def make_nomic(path: Path, seed: int = 0) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = wordpiece_tokenizer(path)
    rows = -(-vocab // 64) * 64
    rng = np.random.default_rng(seed)
    w = _Weights(rng)
    w.dense("embeddings.word_embeddings", (rows, HIDDEN), bias=False)
    w.dense("embeddings.token_type_embeddings", (2, HIDDEN), bias=False)
    w.norm("emb_ln")
    for i in range(LAYERS):
        layer = f"encoder.layers.{i}"
        w.dense(f"{layer}.attn.Wqkv", (3 * HIDDEN, HIDDEN), bias=False)
        w.dense(f"{layer}.attn.out_proj", (HIDDEN, HIDDEN), bias=False)
        w.dense(f"{layer}.mlp.fc11", (NOMIC_MLP, HIDDEN), bias=False)
        w.dense(f"{layer}.mlp.fc12", (NOMIC_MLP, HIDDEN), bias=False)
        w.dense(f"{layer}.mlp.fc2", (HIDDEN, NOMIC_MLP), bias=False)
        w.norm(f"{layer}.norm1")
        w.norm(f"{layer}.norm2")
    _write(path, nomic_config(vocab), w.out)
    return path


def weights(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path / "model.safetensors"))


class _Weights:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.out: dict[str, np.ndarray] = {}

    def dense(self, name: str, shape: tuple[int, int], bias: bool = True) -> None:
        scale = 1 / np.sqrt(shape[1]) if "embeddings" not in name else 0.5
        self.out[f"{name}.weight"] = self.rng.normal(0, scale, shape).astype(np.float32)
        if bias:
            self.out[f"{name}.bias"] = self.rng.normal(0, 0.1, shape[0]).astype(np.float32)

    def norm(self, name: str) -> None:
        self.out[f"{name}.weight"] = (1 + self.rng.normal(0, 0.1, HIDDEN)).astype(np.float32)
        self.out[f"{name}.bias"] = self.rng.normal(0, 0.1, HIDDEN).astype(np.float32)


def _write(path: Path, config: dict, tensors: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(config, indent=2))
    _sentence_transformers(path, "mean", HIDDEN)
