"""`describe(ref)`: everything `mlxd show` prints about one model, as a dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxd.backend.tokenizer.checkpoint_tokenizer import TokenizerRoute, tokenizer_route
from mlxd.checkpoint import (
    EmbeddingSpec,
    VisionFamily,
    context_window,
    embedding_dimensions,
    embedding_spec,
    vision_family,
)
from mlxd.errors import MlxdError, ModelBroken
from mlxd.store import facts
from mlxd.store.files import file_size, model_files
from mlxd.store.health import HealthReport, check, check_runnable
from mlxd.store.model_ref import ModelRef
from mlxd.store.resolve import resolve
from mlxd.store.safetensors_meta import SafetensorsHeader, count_parameters, read_header


@dataclass(frozen=True, slots=True)
class ModelDescription:
    ref: ModelRef
    architecture: str | None
    model_type: str | None
    parameters: int | None
    dtype: str | None
    quantization: dict[str, Any] | None
    context_window: int | None
    kind: str
    chat_template: bool
    reasoning_markers: list[str]
    tool_format: str | None
    eos_tokens: list[str]
    tokenizer: TokenizerRoute  # how the loader will load the tokenizer
    files: list[tuple[str, int]]
    health: HealthReport
    runnable: bool
    not_runnable_reason: str | None
    config: dict[str, Any] = field(default_factory=dict)
    # "full", "8-bit", "4-bit" (--kv-bits); None for an embedding model (it keeps no KV)
    kv_bytes_per_token: dict[str, int] | None = None
    embedding: EmbeddingSpec | None = None  # an embedding model's pooling and normalizing
    dimensions: int | None = None  # an embedding model's vector length
    vision: VisionFamily | None = None  # a vision model's family: batches, or why refused
    mtp_head: str | None = None  # where its MTP head is and whether it fits (inspect.mtp_head)
    dflash: str | None = None  # a DFlash drafter: what target it wants (inspect.dflash_drafter)

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)

    def to_dict(self, *, with_files: bool = True, with_config: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.ref.name,
            "source": self.ref.source,
            "path": str(self.ref.path),
            "revision": self.ref.revision,
            "architecture": self.architecture,
            "model_type": self.model_type,
            "parameters": self.parameters,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "context_window": self.context_window,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kind": self.kind,
            "chat_template": self.chat_template,
            "reasoning_markers": self.reasoning_markers,
            "tool_format": self.tool_format,
            "eos_tokens": self.eos_tokens,
            "tokenizer": {"loader": self.tokenizer.loader.value, "reason": self.tokenizer.reason},
            "size": self.size,
            "health": self.health.to_dict(),
            "runnable": self.runnable,
            "not_runnable_reason": self.not_runnable_reason,
            "vision": facts.vision_dict(self.vision),
            "mtp_head": self.mtp_head,
            "dflash_drafter": self.dflash,
            "embedding": self._embedding_dict(),
        }
        if with_files:
            out["files"] = [{"name": n, "size": s} for n, s in self.files]
        if with_config:
            out["config"] = self.config
        return out

    def _embedding_dict(self) -> dict[str, Any] | None:
        spec = self.embedding
        if spec is None:
            return None
        return {
            "dimensions": self.dimensions,
            "pooling": spec.pooling,
            "normalize": spec.normalize,
            "layer_norm_cut": spec.layer_norm_cut,
        }


def describe(ref: str | ModelRef, deep: bool = True) -> ModelDescription:
    """Resolve (if needed) and describe a model; a broken model is described, not raised.
    `deep` runs the full health check (see health.check)."""
    model = resolve(ref) if isinstance(ref, str) else ref
    root = model.path
    report = check(root, deep=deep)
    config = facts.read_json(root / "config.json")
    tok_config = facts.read_json(root / "tokenizer_config.json")
    gen_config = facts.read_json(root / "generation_config.json")
    tokenizer = facts.read_json(root / "tokenizer.json")
    template = facts.chat_template(root, tok_config)
    vocab = facts.special_vocab(tokenizer) | _vocab_markers(tokenizer)
    id_to_token = _id_to_token(tokenizer)
    quant = facts.quantization(config)
    headers = list(report.headers)
    dtypes = [t.dtype for h in headers for t in h.tensors]
    runnable, reason = _runnable(root, report)
    archs = config.get("architectures") or []
    kind = facts.kind(root, config, template is not None) if config else "unknown"
    spec = embedding_spec(root, config) if kind == "embedding" else None
    kv = None if spec is not None else facts.kv_bytes_per_token(config, facts.dtype(config, dtypes))
    return ModelDescription(
        ref=model,
        architecture=str(archs[0]) if archs else config.get("model_type"),
        model_type=config.get("model_type"),
        parameters=count_parameters(headers, _quant_block(config)) if headers else None,
        dtype=facts.dtype(config, dtypes),
        quantization=quant,
        context_window=context_window(config, tok_config.get("model_max_length")),
        kind=kind,
        chat_template=template is not None,
        reasoning_markers=facts.reasoning_markers(template, vocab),
        tool_format=facts.tool_format(template, vocab),
        eos_tokens=facts.eos_tokens(config, tok_config, gen_config, id_to_token),
        tokenizer=tokenizer_route(root),
        files=_files(root),
        health=report,
        runnable=runnable,
        not_runnable_reason=reason,
        config=config,
        kv_bytes_per_token=kv,
        embedding=spec,
        dimensions=embedding_dimensions(config) if spec is not None else None,
        vision=vision_family(config),
        mtp_head=mtp_head(root, headers, config),
        dflash=dflash_drafter(config),
    )


def _quant_block(config: dict[str, Any]) -> dict[str, Any] | None:
    q = config.get("quantization") or config.get("quantization_config")
    return q if isinstance(q, dict) else None


def _runnable(root: Path, report: HealthReport) -> tuple[bool, str | None]:
    if report.ok:
        return True, None
    try:
        check_runnable(root)
    except ModelBroken as e:  # includes ModelRefused
        return False, e.message
    return False, report.problems[0].message  # only the deep check found it


def _vocab_markers(tokenizer: dict[str, Any]) -> set[str]:
    """Marker strings present as plain vocabulary entries (some models don't mark them added)."""
    vocab = (tokenizer.get("model") or {}).get("vocab")
    if not isinstance(vocab, dict):
        return set()
    candidates = {m for pair in facts.REASONING_MARKERS for m in pair}
    candidates |= {m for _, markers in facts.TOOL_FORMATS for m in markers}
    return {m for m in candidates if m in vocab}


def _id_to_token(tokenizer: dict[str, Any]) -> dict[int, str]:
    out = {
        int(t["id"]): str(t["content"])
        for t in tokenizer.get("added_tokens") or []
        if isinstance(t, dict) and isinstance(t.get("id"), int)
    }
    vocab = (tokenizer.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        for token, i in vocab.items():
            if isinstance(i, int):
                out.setdefault(i, token)
    return out


def _files(root: Path) -> list[tuple[str, int]]:
    try:
        return [(p.relative_to(root).as_posix(), file_size(p)) for p in model_files(root)]
    except OSError:
        return []


MTP_SIDECAR = "mtp.safetensors"  # as backend.speculation.mtp_head reads it


def mtp_head(root: Path, headers: list[SafetensorsHeader], config: dict[str, Any]) -> str | None:
    """One line on the checkpoint's MTP head (`--draft-kind mtp`), from safetensors headers:
    where its tensors are and whether `fc` fits the hidden size; None without one."""
    text = config.get("text_config", config)
    nextn = text.get("num_nextn_predict_layers")
    prefix = f"model.layers.{text.get('num_hidden_layers')}." if nextn else "mtp."
    sidecar = root / MTP_SIDECAR
    if sidecar.is_file():
        try:
            tensors, where = list(read_header(sidecar).tensors), MTP_SIDECAR
        except MlxdError as exc:
            return f"{MTP_SIDECAR} unreadable: {exc}"
    else:
        tensors = [t for h in headers for t in h.tensors if t.name.startswith(prefix)]
        where = f"{prefix}* in the checkpoint"
    if not tensors:
        declared = nextn or text.get("mtp_num_hidden_layers")
        return "declared in config.json, no tensors shipped" if declared else None
    hidden = text.get("hidden_size")
    fc = next((t for t in tensors if t.name.endswith(("fc.weight", "eh_proj.weight"))), None)
    if fc is None:
        return f"{where}: {len(tensors)} tensors, no fc / eh_proj: not usable"
    if isinstance(hidden, int) and fc.shape != (hidden, 2 * hidden):
        return (
            f"{where}: fc is {list(fc.shape)}, hidden size {hidden} wants [{hidden}, {2 * hidden}]"
        )
    return f"{where}: {len(tensors)} tensors (usable: --draft-kind mtp)"


def dflash_drafter(config: dict[str, Any]) -> str | None:
    """One line on a DFlash drafter checkpoint (`--draft-model`, kind dflash): the target it
    was made for (hidden size, vocabulary, the layers it reads) and its block; None for any
    other checkpoint. Read from config.json (backend.speculation.dflash_load checks a pair)."""
    block = config.get("dflash_config")
    if not isinstance(block, dict):
        return None
    return (
        f"for a target of hidden size {config.get('hidden_size')}, vocabulary "
        f"{config.get('vocab_size')}, reading its layers {block.get('target_layer_ids')}; "
        f"blocks of {config.get('block_size')} (use as --draft-model)"
    )
