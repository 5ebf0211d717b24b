"""checkpoint.embedding_spec: which checkpoints are embedding models and how they pool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxd.checkpoint import EmbeddingSpec, embedding_spec

ST = "sentence_transformers.models."
MEAN = "pooling_mode_mean_tokens"


def _layout(root: Path, modules: list[str] | None, pooling: dict | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if modules is not None:
        listed = [
            {"idx": i, "path": f"{i}_{m}" if m != "Transformer" else "", "type": ST + m}
            for i, m in enumerate(modules)
        ]
        (root / "modules.json").write_text(json.dumps(listed))
    if pooling is not None:
        (root / "1_Pooling").mkdir()
        (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return root


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, None),
        ({"model_type": "bert"}, EmbeddingSpec("cls", True, True)),
        (
            {"model_type": "modernbert", "architectures": ["ModernBertModel"]},
            EmbeddingSpec("cls", True, True),
        ),
        (
            {"model_type": "qwen3", "architectures": ["Qwen3Model"]},
            EmbeddingSpec("last", True, False),
        ),
        ({"model_type": "nomic_bert"}, EmbeddingSpec("cls", True, True, layer_norm_cut=True)),
    ],
    ids=["causal-lm", "bert", "modernbert", "bare-decoder-body", "nomic-bert"],
)
def test_without_modules_json(tmp_path: Path, config: dict, expected: EmbeddingSpec | None) -> None:
    assert embedding_spec(tmp_path, config) == expected


@pytest.mark.parametrize(
    ("key", "mode"),
    [
        ("pooling_mode_mean_tokens", "mean"),
        ("pooling_mode_cls_token", "cls"),
        ("pooling_mode_max_tokens", "max"),
        ("pooling_mode_lasttoken", "last"),
    ],
)
def test_pooling_from_1_pooling(tmp_path: Path, key: str, mode: str) -> None:
    root = _layout(tmp_path / "m", ["Transformer", "Pooling", "Normalize"], {key: True})
    spec = embedding_spec(root, {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})
    assert spec == EmbeddingSpec(mode, True, False)


def test_no_normalize_module_means_raw_vectors(tmp_path: Path) -> None:
    root = _layout(tmp_path / "m", ["Transformer", "Pooling"], {"pooling_mode_mean_tokens": True})
    assert embedding_spec(root, {"model_type": "bert"}) == EmbeddingSpec("mean", False, True)


def test_nomic_bert_layer_norms_before_a_cut_in_its_sentence_transformers_layout(
    tmp_path: Path,
) -> None:
    root = _layout(tmp_path / "m", ["Transformer", "Pooling", "Normalize"], {MEAN: True})
    assert embedding_spec(root, {"model_type": "nomic_bert"}) == EmbeddingSpec(
        "mean", True, True, layer_norm_cut=True
    )


def test_unreadable_modules_json_falls_back(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text("{not json")
    assert embedding_spec(tmp_path, {"model_type": "llama"}) is None
    assert embedding_spec(tmp_path, {"model_type": "bert"}) == EmbeddingSpec("cls", True, True)


def test_roberta_family_windows_leave_out_the_padding_offset() -> None:
    from mlxd.checkpoint import context_window

    xlmr = {"model_type": "xlm-roberta", "max_position_embeddings": 514, "pad_token_id": 1}
    assert context_window(xlmr) == 512  # positions count from pad_token_id + 1
    assert context_window({"model_type": "bert", "max_position_embeddings": 512}) == 512


def test_which_class_runs_each_encoder_family() -> None:
    from mlxd.checkpoint import encoder_module, runs_own_network

    assert [encoder_module(t) for t in ("bert", "xlm-roberta", "roberta", "modernbert")] == [
        "bert",
        "xlm_roberta",
        "xlm_roberta",  # RoBERTa is XLM-R's network with another vocabulary
        "modernbert",
    ]
    assert runs_own_network({"model_type": "nomic_bert"})
    assert not runs_own_network({"model_type": "roberta"})


def test_nomic_windows_stop_where_dynamic_rotary_scaling_starts() -> None:
    from mlxd.checkpoint import context_window

    nomic = {"model_type": "nomic_bert", "n_positions": 8192, "max_trained_positions": 2048}
    assert context_window(nomic) == 8192  # plain rotary: the same at every width
    assert context_window({**nomic, "rotary_scaling_factor": 2}) == 2048
