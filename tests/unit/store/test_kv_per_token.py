"""`mlxd show`'s KV bytes per token at each --kv-bits setting, from config.json alone."""

from __future__ import annotations

from mlxd.store.facts import kv_bytes_per_token


def test_dense_attention_at_each_setting() -> None:
    config = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
              "hidden_size": 256}  # fmt: skip
    # 4 layers x (keys + values) x 2 heads; head dim 64 at 4 bytes, or 8 / 4 bits + a float32
    # scale and bias per 64 values (what the engine measures on the same checkpoint); 16-bit
    # keys keep float32 scales and biases whatever the model's dtype (quantized16)
    assert kv_bytes_per_token(config, "float32") == {
        "full": 16 * 256, "8-bit": 16 * 72, "4-bit": 16 * 40,
        "8-bit, 16-bit keys": 8 * 136 + 8 * 72,
    }  # fmt: skip
    assert kv_bytes_per_token(config, "bfloat16") == {
        "full": 16 * 128, "8-bit": 16 * 68, "4-bit": 16 * 36,
        "8-bit, 16-bit keys": 8 * 136 + 8 * 68,
    }  # fmt: skip


def test_only_full_attention_layers_grow() -> None:
    gemma = {"num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 64, "sliding_window_pattern": 3}  # fmt: skip
    assert kv_bytes_per_token(gemma, "bfloat16")["full"] == 2 * 2 * 2 * 128  # type: ignore[index]
    typed = {**gemma, "layer_types": ["sliding_attention", "full_attention", "linear_attention"]}
    assert kv_bytes_per_token(typed, "bfloat16")["full"] == 2 * 2 * 128  # type: ignore[index]
    assert kv_bytes_per_token({"model_type": "x"}, None) is None


def test_a_head_dim_groups_do_not_split_lists_full_precision_only() -> None:
    tiny = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "hidden_size": 64}  # fmt: skip
    assert kv_bytes_per_token(tiny, "float32") == {"full": 2 * 2 * 2 * 16 * 4}
