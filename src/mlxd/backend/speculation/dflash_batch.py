"""One DFlash drafter forward for many rows (speculation.dflash_drafter asks).

mlx-vlm's DFlashAttention takes one cache offset and no mask (its block is non-causal), so
its forward serves one row at a time. This one runs the same computation over the drafter's
own weights for a batch: each row's new context states (right-padded), its block, its own
per-layer KV cache (appended as mlx-vlm's attention does: context keys only), the cached keys
left-padded to the longest row and masked out, per-row rotary offsets. Only drafters of
full-attention layers without sink biases take it (`batchable`); others draft row by row.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx


def batchable(drafter: Any) -> bool:
    """The drafter's layers are all full, non-causal attention without sinks or a window."""
    config = drafter.config
    return (
        all(t == "full_attention" for t in config.layer_types)
        and not getattr(config, "draft_window_size", None)
        and all(
            layer.self_attn.attention_sink_bias is None and not layer.self_attn.is_causal
            for layer in drafter.layers
        )
    )


def draft_logits(
    drafter: Any, blocks: mx.array, contexts: list[mx.array], caches: list[list[Any]]
) -> mx.array:
    """Logits of each row's block (rows x block x vocab): row i's block attends to its cache
    plus contexts[i] (1 x S_i x n*hidden, appended to caches[i]) and to itself."""
    widths = [c.shape[1] for c in contexts]
    most = max(widths)
    padded = mx.concatenate(
        [mx.pad(c, [(0, 0), (0, most - c.shape[1]), (0, 0)]) for c in contexts], axis=0
    )
    h_ctx = drafter.hidden_norm(drafter.fc(padded))
    starts = [int(layer_cache[0].offset) for layer_cache in caches]  # before this context
    h = drafter._embed_input_tokens(blocks)
    for index, layer in enumerate(drafter.layers):
        layer_caches = [row[index] for row in caches]
        h = h + _attention(layer.self_attn, layer.input_layernorm(h), h_ctx, drafter.rope,
                           layer_caches, starts, widths)  # fmt: skip
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    out: mx.array = drafter._logits(drafter.norm(h))
    return out


def _attention(
    attn: Any,
    x: mx.array,
    h_ctx: mx.array,
    rope: Any,
    caches: list[Any],
    starts: list[int],
    widths: list[int],
) -> mx.array:
    """DFlashAttention over a batch (module docstring)."""
    rows, length, _ = x.shape
    heads, kv_heads = attn.n_heads, attn.n_kv_heads

    def split(t: mx.array, n: int, norm: Any = None) -> mx.array:
        """rows x positions x n*D -> rows x n x positions x D (normed per head first)."""
        t = t.reshape(rows, t.shape[1], n, -1)
        return (norm(t) if norm is not None else t).transpose(0, 2, 1, 3)

    ctx_keys, ctx_values = attn._project_kv(h_ctx)
    ctx_keys = rope(split(ctx_keys, kv_heads, attn.k_norm), offset=mx.array(starts))
    ctx_values = split(ctx_values, kv_heads)
    after = mx.array([s + w for s, w in zip(starts, widths, strict=True)])
    queries = rope(split(attn.q_proj(x), heads, attn.q_norm), offset=after)
    block_keys, block_values = attn._project_kv(x)
    block_keys = rope(split(block_keys, kv_heads, attn.k_norm), offset=after)
    block_values = split(block_values, kv_heads)
    keys, values = [], []
    for i, (cache, width) in enumerate(zip(caches, widths, strict=True)):
        row = slice(i, i + 1)
        k, v = cache.update_and_fetch(ctx_keys[row, :, :width], ctx_values[row, :, :width])
        keys.append(k)
        values.append(v)
    longest = max(k.shape[2] for k in keys)
    all_keys = mx.concatenate([_left_pad(k, longest) for k in keys], axis=0)
    all_values = mx.concatenate([_left_pad(v, longest) for v in values], axis=0)
    seen = mx.array([k.shape[2] for k in keys])
    positions = mx.arange(longest + length)
    mask = (positions[None, :] >= (longest - seen)[:, None])[:, None, None, :]
    out = mx.fast.scaled_dot_product_attention(
        queries,
        mx.concatenate([all_keys, block_keys], axis=2),
        mx.concatenate([all_values, block_values], axis=2),
        scale=attn.scale,
        mask=mask,
    )
    result: mx.array = attn.o_proj(out.transpose(0, 2, 1, 3).reshape(rows, length, -1))
    return result


def _left_pad(t: mx.array, length: int) -> mx.array:
    """rows x heads x positions x D, zero positions put before to make `length`."""
    return mx.pad(t, [(0, 0), (0, 0), (length - t.shape[2], 0), (0, 0)])
