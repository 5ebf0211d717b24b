"""A checkpoint's multi-token-prediction (MTP) head, loaded beside the model mlx-lm loads.

Qwen3-Next / Qwen3.5 layout (`mtp.*`): `fc` over the concatenation of the normed embedding
of token t+1 (`pre_fc_norm_embedding`) and the normed hidden state at t
(`pre_fc_norm_hidden`), one decoder layer (`layers.0`, full attention, its own KV), a final
`norm`; the embeddings and lm_head are the target's. DeepSeek-V3 / GLM layout (the layer at
`model.layers.<num_hidden_layers>`): `enorm`, `hnorm`, `eh_proj`, the layer, and
`shared_head.norm`, renamed here to the same parts. mlx-lm's `sanitize` drops both (or its
strict load refuses them), so the weights are read from the checkpoint's safetensors, or
from an `mtp.safetensors` beside them (conversions that stripped the head add it back so).

The decoder layer is a copy of the target's last full-attention layer (mlx-lm's class, the
target's config) with the head's weights in it. Families whose RMSNorm weights
are zero-centred (`_SHIFTED`: the checkpoint stores w - 1) get +1, as mlx-lm's sanitize does
for the target's own norms.
"""

from __future__ import annotations

import copy
import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import mlx.core as mx
from mlx.nn.layers.base import Module
from mlx.nn.layers.linear import Linear
from mlx.nn.layers.normalization import RMSNorm
from mlx.nn.layers.quantized import QuantizedLinear
from mlx.utils import tree_unflatten
from mlx_lm.models.base import create_attention_mask

from mlxd.errors import InvalidRequest

if TYPE_CHECKING:
    from mlxd.backend.api import LoadedModel
    from mlxd.backend.mlx_lm.compat import PromptCache

SIDECAR = "mtp.safetensors"
_SHIFTED = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text"})
# DeepSeek / GLM part names -> the Qwen names this module uses.
_RENAMES = {
    "enorm.": "pre_fc_norm_embedding.",
    "hnorm.": "pre_fc_norm_hidden.",
    "eh_proj.": "fc.",
    "shared_head.norm.": "norm.",
}
_SHARED = (
    "shared_head.head.",
    "embed_tokens.",
    "layers.0.shared_head.head.",
    "layers.0.embed_tokens.",
)
_HEAD_PARTS = ("fc.", "pre_fc_norm_embedding.", "pre_fc_norm_hidden.", "norm.")


class MtpHead(Module):
    """One MTP step: (pre-norm hidden at t, token t+1) -> (its own pre-norm hidden, logits
    for token t+2 over the target's vocabulary)."""

    def __init__(self, target: Module, layer: Module, hidden: int, eps: float) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.fc = Linear(2 * hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = RMSNorm(hidden, eps=eps)
        self.pre_fc_norm_hidden = RMSNorm(hidden, eps=eps)
        self.layers = [layer]
        self.norm = RMSNorm(hidden, eps=eps)
        # Not a child module: the target's weights are not the head's parameters.
        object.__setattr__(self, "_target", target)

    def __call__(
        self, hidden: mx.array, tokens: mx.array, cache: PromptCache
    ) -> tuple[mx.array, mx.array]:
        target: Module = object.__getattribute__(self, "_target")
        inner = target.model
        embedded = self.pre_fc_norm_embedding(inner.embed_tokens(tokens))
        x = self.fc(mx.concatenate([embedded, self.pre_fc_norm_hidden(hidden)], axis=-1))
        mask = create_attention_mask(x, cache[0])
        x = self.layers[0](x, mask, cache[0])
        return x, _lm_head(target, self.norm(x))


def carries_head(path: Path, config: dict[str, Any]) -> bool:
    """The checkpoint (or an mtp.safetensors beside it) has MTP tensors."""
    return bool(_tensor_files(path, config))


def load_mtp_head(path: Path, model: Module, config: dict[str, Any]) -> MtpHead:
    """The MTP head of the checkpoint at `path` for its loaded `model`. Raises
    InvalidRequest (param draft_kind) naming what is missing or mismatched; nothing of the
    head is kept then."""
    files = _tensor_files(path, config)
    if not files:
        raise InvalidRequest(
            f"{path.name} carries no MTP head (no mtp.* tensors, no {SIDECAR})",
            param="draft_kind",
        )
    weights = _read(files, config)
    if _prefix(config) != "mtp.":
        weights = _sanitized_layer(model, weights)
    layers = cast("list[Module]", getattr(model, "layers", []))
    # The last attention layer: where the first ones are dense (DeepSeek / GLM's
    # first_k_dense_replace), the next-token layer is sparse like the last ones.
    attention = next((layer for layer in reversed(layers) if "self_attn" in layer), None)
    text = config.get("text_config", config)
    hidden = int(text["hidden_size"])
    if attention is None:
        raise InvalidRequest(f"{path.name}: no attention layer to build an MTP head from")
    layer = copy.deepcopy(attention)
    if not any(key.endswith(".scales") for key in weights):
        _unquantized(layer)  # a float head beside a quantized target
    eps = float(text.get("rms_norm_eps", 1e-6))
    text_model = cast("Module", getattr(model, "language_model", model))  # Qwen3.5: its LM
    head = MtpHead(text_model, layer, hidden, eps)
    try:
        head.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise InvalidRequest(
            f"the MTP head of {path.name} does not fit the model: {exc}".replace("\n", " "),
            param="draft_kind",
        ) from exc
    mx.eval(head.parameters())  # type: ignore[no-untyped-call]
    return head


def with_mtp_head(loaded: LoadedModel) -> LoadedModel:
    """`loaded` with its checkpoint's MTP head when it carries a usable one, else with the
    reason it has none (said to a request of kind `mtp`)."""
    path, config = loaded.path, loaded.config
    if loaded.vision is not None or loaded.embedder is not None:
        return replace(loaded, mtp_problem=f"{path.name} has no MTP head (not a text model)")
    if not carries_head(path, config):
        why = f"{path.name} carries no MTP head (no mtp.* tensors, no {SIDECAR})"
        return replace(loaded, mtp_problem=why)
    try:
        return replace(loaded, mtp=load_mtp_head(path, loaded.model, config))
    except InvalidRequest as exc:
        return replace(loaded, mtp_problem=str(exc))


def _unquantized(layer: Module) -> None:
    """Swap the layer's quantized linear layers for float ones of the same shapes."""
    swaps = []
    for name, module in layer.named_modules():  # type: ignore[no-untyped-call]
        if isinstance(module, QuantizedLinear):
            out_dims, packed = module.weight.shape
            in_dims = packed * 32 // module.bits
            swaps.append((name, Linear(in_dims, out_dims, bias="bias" in module)))
    if swaps:
        layer.update_modules(tree_unflatten(swaps))


def _lm_head(target: Module, x: mx.array) -> mx.array:
    head = getattr(target, "lm_head", None)
    if head is not None:
        return cast("mx.array", head(x))
    return cast("mx.array", target.model.embed_tokens.as_linear(x))


def _prefix(config: dict[str, Any]) -> str:
    """Where the head's tensors live in the checkpoint: `mtp.`, or the next-token layer's
    `model.layers.<n>.` when the config declares DeepSeek-style next-token layers."""
    text = config.get("text_config", config)
    if text.get("num_nextn_predict_layers"):
        return f"model.layers.{int(text['num_hidden_layers'])}."
    return "mtp."


def _tensor_files(path: Path, config: dict[str, Any]) -> list[Path]:
    """The safetensors files holding the head's tensors (read from their headers)."""
    prefix = _prefix(config)
    sidecar = path / SIDECAR
    if sidecar.is_file():
        return [sidecar]
    return [f for f in sorted(path.glob("*.safetensors")) if _names(f, prefix)]


def _names(file: Path, prefix: str) -> list[str]:
    """Tensor names under `prefix` in a safetensors file, from its JSON header only."""
    try:
        with file.open("rb") as stream:
            (size,) = struct.unpack("<Q", stream.read(8))
            header = json.loads(stream.read(min(size, 100 << 20)))
    except (OSError, ValueError, struct.error):
        return []
    return [name for name in header if name.startswith(prefix)]


def _read(files: list[Path], config: dict[str, Any]) -> dict[str, mx.array]:
    """The head's tensors, named as MtpHead's parameters (norms shifted where needed)."""
    prefix = _prefix(config)
    shift = config.get("model_type") in _SHIFTED
    weights: dict[str, mx.array] = {}
    for file in files:
        loaded = cast("dict[str, mx.array]", mx.load(str(file)))
        for name, value in loaded.items():
            if not name.startswith(prefix) and file.name != SIDECAR:
                continue
            key = _head_key(name.removeprefix(prefix).removeprefix("mtp."))
            if key.startswith(_SHARED):
                continue  # DeepSeek repeats the shared embeddings and lm_head per layer
            if shift and _is_norm(key) and value.ndim == 1:
                value = value + 1.0
            weights[key] = value
    return _stacked_experts(weights)


def _sanitized_layer(model: Module, weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """The head's layer as the target's own sanitize leaves its layers (DeepSeek-V3's
    attention: kv_b_proj split into embed_q / unembed_out), run on it as layer 0."""
    sanitize = getattr(model, "sanitize", None)
    inner = "model.layers.0."
    layer = {
        inner + k.removeprefix("layers.0."): v for k, v in weights.items() if k[:9] == "layers.0."
    }
    if sanitize is None or not layer:
        return weights
    kept = {k: v for k, v in weights.items() if not k.startswith("layers.0.")}
    done = cast("dict[str, mx.array]", sanitize(layer))
    kept.update(
        {"layers.0." + k.removeprefix(inner): v for k, v in done.items() if k.startswith(inner)}
    )
    return kept


def _stacked_experts(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """HF keeps an MoE layer's experts apart (`mlp.experts.<e>.<proj>.weight`); mlx-lm's
    layer stacks them (`mlp.switch_mlp.<proj>.weight`), as its sanitize does for the target."""
    groups: dict[tuple[str, str], dict[int, mx.array]] = {}
    for key in [k for k in weights if ".mlp.experts." in k and k.endswith(".weight")]:
        head, rest = key.split(".mlp.experts.", 1)
        expert, proj = rest.split(".", 1)
        if expert.isdigit():
            groups.setdefault((head, proj), {})[int(expert)] = weights.pop(key)
    for (head, proj), experts in groups.items():
        stacked = [experts[e] for e in sorted(experts)]
        weights[f"{head}.mlp.switch_mlp.{proj}"] = mx.stack(stacked)
    return weights


def _is_norm(key: str) -> bool:
    """An RMSNorm's weight (`norm`, `pre_fc_norm_*`, a layer's `*_layernorm`, `q_norm`...)."""
    parts = key.split(".")
    return parts[-1] == "weight" and "norm" in parts[-2]


def _head_key(name: str) -> str:
    for old, new in _RENAMES.items():
        if name.startswith(old):
            return new + name.removeprefix(old)
    if name.startswith(_HEAD_PARTS) or name.startswith("layers."):
        return name
    return "layers.0." + name  # DeepSeek: the layer's own parts sit at the prefix
