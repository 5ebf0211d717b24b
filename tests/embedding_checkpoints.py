"""Tiny random-weight embedding checkpoints for tests, in the sentence-transformers layout
(modules.json, 1_Pooling/config.json, a Normalize module), built from the libraries' own model
classes and never downloaded.

make_encoder(path)  BERT (mlx-embeddings' class), WordPiece tokenizer with [CLS] ... [SEP],
                    CLS pooling, normalized (like bge)
make_decoder(path)  Qwen3 (mlx-lm's class), byte-level BPE tokenizer that appends
                    <|endoftext|>, last-token pooling, normalized (like Qwen3-Embedding)
`pooling` overrides the checkpoint's pooling mode (cls, mean, max, lasttoken). make_decoder's
`flat=True` stores the body as Qwen ships Qwen3-Embedding: keys without `model.`, and no
`lm_head` although the config unties it (as the 8B checkpoint does).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.checkpoints import _CORPUS, train_tokenizer

BERT_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SIZES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, heads=4),
    "small": dict(hidden_size=128, num_hidden_layers=2, intermediate_size=256, heads=4),
}


def make_encoder(
    path: Path, seed: int = 0, pooling: str = "cls", size: str = "tiny", family: str = "bert"
) -> Path:
    """`family` "xlm-roberta": XLM-R's class, positions counted from pad_token_id + 1."""
    from mlx_embeddings.models import bert, xlm_roberta

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = _wordpiece_tokenizer(path)
    dims = SIZES[size]
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": dims["hidden_size"],
        "num_hidden_layers": dims["num_hidden_layers"],
        "intermediate_size": dims["intermediate_size"],
        "num_attention_heads": dims["heads"],
        "max_position_embeddings": 128,
        "type_vocab_size": 2,
        "vocab_size": vocab,
        "pad_token_id": 0,
        "layer_norm_eps": 1e-12,
    }
    if family == "xlm-roberta":
        config.update(model_type="xlm-roberta", architectures=["XLMRobertaModel"])
        config.update(type_vocab_size=1, max_position_embeddings=66)  # 65 tokens fit (pad id 0)
    module = xlm_roberta if family == "xlm-roberta" else bert
    model = module.Model(module.ModelArgs.from_dict(config))
    _save(path, model, config, seed)
    _sentence_transformers(path, pooling, dims["hidden_size"])
    return path


def make_decoder(
    path: Path, seed: int = 0, pooling: str = "lasttoken", size: str = "tiny", flat: bool = False
) -> Path:
    from mlx_lm.models import qwen3
    from tokenizers.processors import TemplateProcessing

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(512, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", eos)]
    )
    tok.save(str(path / "tokenizer.json"))
    _tokenizer_config(path, {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    dims = SIZES[size]
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": dims["hidden_size"],
        "num_hidden_layers": dims["num_hidden_layers"],
        "intermediate_size": dims["intermediate_size"],
        "num_attention_heads": dims["heads"],
        "num_key_value_heads": 2,
        "head_dim": dims["hidden_size"] // dims["heads"],
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e6,
        "vocab_size": tok.get_vocab_size(),
        "max_position_embeddings": 256,
        "tie_word_embeddings": True,
        "eos_token_id": eos,
        "pad_token_id": eos,
    }
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    _save(path, model, config, seed)
    if flat:
        _flatten(path, config)
    _sentence_transformers(path, pooling, dims["hidden_size"])
    return path


def _flatten(path: Path, config: dict) -> None:
    import mlx.core as mx

    weights = mx.load(str(path / "model.safetensors"))
    flat = {k.removeprefix("model."): v for k, v in weights.items() if not k.startswith("lm_head")}
    mx.save_safetensors(str(path / "model.safetensors"), flat, metadata={"format": "pt"})
    (path / "config.json").write_text(
        json.dumps({**config, "tie_word_embeddings": False}, indent=2)
    )


def _wordpiece_tokenizer(path: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=BERT_SPECIAL, show_progress=False
    )
    tok.train_from_iterator([_CORPUS] * 20, trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.save(str(path / "tokenizer.json"))
    _tokenizer_config(path, {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]"})
    return int(tok.get_vocab_size())


def _tokenizer_config(path: Path, tokens: dict[str, str]) -> None:
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512, **tokens}
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def _save(path: Path, model: object, config: dict, seed: int) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    mx.random.seed(seed)
    params = tree_flatten(model.parameters())  # type: ignore[attr-defined]
    model.load_weights(  # type: ignore[attr-defined]
        [
            (k, mx.random.normal(v.shape) * 0.5) if "norm" not in k.lower() else (k, v)
            for k, v in params
        ]
    )
    weights = dict(tree_flatten(model.parameters()))  # type: ignore[attr-defined]
    mx.eval(weights)
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    (path / "config.json").write_text(json.dumps(config, indent=2))


def _sentence_transformers(path: Path, pooling: str, dims: int) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
        {
            "idx": 2,
            "name": "2",
            "path": "2_Normalize",
            "type": "sentence_transformers.models.Normalize",
        },
    ]
    (path / "modules.json").write_text(json.dumps(modules, indent=2))
    (path / "1_Pooling").mkdir(exist_ok=True)
    modes = ("cls_token", "mean_tokens", "max_tokens", "lasttoken")
    key = {"cls": "cls_token", "mean": "mean_tokens", "max": "max_tokens"}.get(pooling, pooling)
    pooled = {"word_embedding_dimension": dims, **{f"pooling_mode_{m}": m == key for m in modes}}
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooled, indent=2))
