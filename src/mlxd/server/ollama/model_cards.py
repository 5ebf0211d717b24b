"""Served models in Ollama's shapes: /api/tags entries, /api/show's body, /api/ps entries.

Names get Ollama's default tag (`tiny-chat:latest`), which requests may send back (it is
dropped again, schemas.served_name). Sizes and dates are the model directory's; the digest
is a stable id of the name and date, not a content hash (mlxd has no Ollama blobs);
`parameter_size` is not known without loading, so it is empty.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxd.checkpoint import embedding_dimensions, embedding_spec, read_json_object
from mlxd.server.ollama.schemas import LATEST
from mlxd.types import ModelKind

if TYPE_CHECKING:
    from mlxd.engine import ModelInfo
    from mlxd.store.catalog import CatalogEntry

NEVER = "0001-01-01T00:00:00Z"  # /api/ps expires_at: residency is the engine's, not tracked


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the cards say of one model, from the store's catalog or its loaded ModelInfo."""

    name: str
    path: Path | None
    size: int
    modified: float
    kind: str
    quantization: str
    context_window: int | None

    @classmethod
    def of(cls, name: str, entry: CatalogEntry | None, info: ModelInfo | None) -> ModelFacts:
        if entry is not None:
            return cls(
                name,
                entry.path,
                entry.size,
                entry.modified,
                entry.kind,
                entry.quantization,
                entry.context_window,
            )
        path = info.path if info is not None else None
        files = [f for f in path.iterdir() if f.is_file()] if path and path.is_dir() else []
        size = sum(f.stat().st_size for f in files)
        modified = max((f.stat().st_mtime for f in files), default=0.0)
        kind = "vision" if info is not None and info.image_processor is not None else "chat"
        if info is not None and info.kind is ModelKind.EMBEDDING:
            kind = "embedding"  # a model served by path: not in the catalog
        window = info.context_window if info is not None else None
        return cls(name, path, size, modified, kind, "", window)

    @property
    def tagged(self) -> str:
        return self.name if ":" in self.name else self.name + LATEST

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.name}@{self.modified}".encode()).hexdigest()

    @property
    def modified_at(self) -> str:
        return datetime.fromtimestamp(self.modified, UTC).isoformat().replace("+00:00", "Z")

    def architecture(self) -> str:
        config = read_json_object(self.path / "config.json") if self.path else {}
        arch = config.get("model_type")
        return arch if isinstance(arch, str) else "unknown"

    def details(self) -> dict[str, Any]:
        arch = self.architecture()
        return {
            "parent_model": "",
            "format": "mlx",
            "family": arch,
            "families": [arch],
            "parameter_size": "",
            "quantization_level": self.quantization,
        }


def tag_entry(facts: ModelFacts) -> dict[str, Any]:
    """One model of /api/tags."""
    return {
        "name": facts.tagged,
        "model": facts.tagged,
        "modified_at": facts.modified_at,
        "size": facts.size,
        "digest": facts.digest,
        "details": facts.details(),
    }


def ps_entry(facts: ModelFacts) -> dict[str, Any]:
    """One loaded model of /api/ps (mlxd runs on the CPU here: size_vram 0)."""
    return tag_entry(facts) | {
        "expires_at": NEVER,
        "size_vram": 0,
        "context_length": facts.context_window or 0,
    }


def show_body(facts: ModelFacts) -> dict[str, Any]:
    """/api/show: details, the window under Ollama's model_info key, capabilities."""
    arch = facts.architecture()
    info: dict[str, Any] = {"general.architecture": arch}
    if facts.context_window:
        info[f"{arch}.context_length"] = facts.context_window
    if facts.kind == "embedding" and facts.path is not None:
        info |= _embedding_info(facts.path, arch)
    capabilities = ["embedding" if facts.kind == "embedding" else "completion"]
    template = _template_text(facts.path)
    if "tools" in template:
        capabilities.append("tools")
    if "<think>" in template or "enable_thinking" in template:
        capabilities.append("thinking")
    if facts.kind == "vision":
        capabilities.append("vision")
    return {
        "modelfile": f"# served by mlxd: {facts.name}\n",
        "parameters": "",
        "template": "",
        "details": facts.details(),
        "model_info": info,
        "capabilities": capabilities,
        "modified_at": facts.modified_at,
    }


# llama.cpp's pooling types, as Ollama's model_info reports them (max pooling has none).
_POOLING_TYPES = {"mean": 1, "cls": 2, "last": 3}


def _embedding_info(path: Path, arch: str) -> dict[str, Any]:
    """Ollama's model_info keys of an embedding model: its vector length and pooling."""
    config = read_json_object(path / "config.json")
    out: dict[str, Any] = {}
    if dims := embedding_dimensions(config):
        out[f"{arch}.embedding_length"] = dims
    spec = embedding_spec(path, config)
    if spec is not None and spec.pooling in _POOLING_TYPES:
        out[f"{arch}.pooling_type"] = _POOLING_TYPES[spec.pooling]
    return out


def _template_text(path: Path | None) -> str:
    """The model's Jinja chat template as text ("" when it has none), for capabilities."""
    if path is None:
        return ""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    template = read_json_object(path / "tokenizer_config.json").get("chat_template")
    return json.dumps(template) if template else ""
