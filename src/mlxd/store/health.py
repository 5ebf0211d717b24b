"""Integrity and safety checks of a model directory, without loading any tensor.

`check(path)` lists every problem found; `check_runnable(path)` raises the first blocking one.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from mlxd.checkpoint import (
    embedding_spec,
    encoder_module,
    encoder_refusal,
    runs_own_network,
    vision_family,
)
from mlxd.errors import ModelBroken, ModelRefused, ModelTooLarge, one_line
from mlxd.store import files as F
from mlxd.store.containment import outside_problems
from mlxd.store.hfcache import expected_files, repo_for_snapshot
from mlxd.store.hub.verify import verify_problems
from mlxd.store.limits import architecture_problems, memory_problems
from mlxd.store.problems import Problem, Severity
from mlxd.store.safetensors_meta import SafetensorsHeader, read_header


@dataclass(frozen=True, slots=True)
class HealthReport:
    path: Path
    problems: tuple[Problem, ...] = ()
    headers: tuple[SafetensorsHeader, ...] = ()  # parsed on the way, reused by inspect

    @property
    def status(self) -> str:
        """ "ok", or the worst severity: incomplete > broken > refused > too_large."""
        for sev in Severity:
            if any(p.severity is sev for p in self.problems):
                return sev.value
        return "ok"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "problems": [p.to_dict() for p in self.problems]}


def check_runnable(path: Path, trust_remote_code: bool = False) -> None:
    """Raise ModelBroken (incl. incomplete), ModelRefused or ModelTooLarge if the model cannot
    be run. Reads headers only: a model is refused before any of it is loaded.

    `trust_remote_code` waives auto_map / model_file refusals, never pickle-only weights
    (mlx-lm cannot load them anyway)."""
    report = check(path)
    found = {sev: [p for p in report.problems if p.severity is sev] for sev in Severity}
    blocking = found[Severity.INCOMPLETE] + found[Severity.BROKEN]
    if blocking:
        raise ModelBroken(f"model at {path} is {blocking[0].severity.value}: {blocking[0].message}")
    refused = [
        p for p in found[Severity.REFUSED] if not (trust_remote_code and p.code != "pickle_only")
    ]
    if refused:
        hint = "" if refused[0].code == "pickle_only" else " (pass --trust-remote-code to allow)"
        raise ModelRefused(f"model at {path} is refused: {refused[0].message}{hint}")
    if found[Severity.TOO_LARGE]:
        raise ModelTooLarge(f"model at {path} is too large: {found[Severity.TOO_LARGE][0].message}")


def check(path: Path, deep: bool = False, verify: bool = False) -> HealthReport:
    """Every problem of the model directory at `path` (never raises for a bad model).

    `deep` also loads tokenizer.json with `tokenizers` (about a second for big vocabularies,
    so `list` skips it and `health` does it). `verify` also hashes every file of a cached
    snapshot against the hub's recorded checksums (reads the whole model)."""
    path = Path(path)
    if not path.is_dir():
        return _report(path, [_broken("missing", f"{path} is not a directory")])
    if not os.access(path, os.R_OK | os.X_OK):
        return _report(path, [_broken("unreadable", f"directory {path} is not readable")])
    try:
        escaped = outside_problems(path)  # before reading anything through a link
        names = F.model_files(path)
    except OSError as e:
        return _report(path, [_broken("unreadable", f"cannot list {path}: {e.strerror}")])
    if escaped:
        return _report(path, escaped)
    problems: list[Problem] = []
    problems += _check_partial(path)
    problems += _check_links(path, names)
    pointers = [p for p in names if F.is_lfs_pointer(p)]
    problems += [
        _broken("lfs_pointer", f"{_rel(path, p)} is a Git-LFS pointer, not the file")
        for p in pointers
    ]
    skip = set(pointers)
    config = _load_json(path / "config.json", problems, skip, required=True)
    tok_config = _load_json(path / "tokenizer_config.json", problems, skip, required=False)
    encoder = config is not None and _is_encoder(path, config)
    if config is not None:
        problems += _check_kind(path, config, encoder)
    problems += _check_remote_code(config, tok_config)
    headers, weight_problems = _check_weights(path, names, skip)
    problems += weight_problems
    if config is not None and headers:  # what loading it would build and need, from headers
        problems += architecture_problems(config, headers)
        problems += memory_problems(headers)
    # A DFlash drafter has no tokenizer (it reads its target's) nor an mlx-lm architecture.
    drafter = config is not None and "dflash_config" in config
    if not drafter:
        problems += _check_tokenizer(path, skip, deep)
    # Only a sound model is built (its config passed store.limits); mlx-vlm builds vision ones.
    vision = config is not None and _is_vision(config)
    if deep and not problems and not vision and not encoder and not drafter:
        problems += _check_binding(path)
    if verify:
        problems += verify_problems(path)
    return HealthReport(path, tuple(problems), tuple(headers))


def _report(path: Path, problems: list[Problem]) -> HealthReport:
    return HealthReport(path, tuple(problems))


def _broken(code: str, message: str) -> Problem:
    return Problem(Severity.BROKEN, code, message)


def _rel(root: Path, p: Path) -> str:
    return p.relative_to(root).as_posix()


def _load_json(
    file: Path, problems: list[Problem], skip: set[Path], required: bool
) -> dict[str, Any] | None:
    if file in skip:
        return None
    if not file.exists():
        if required:
            problems.append(_broken("no_config", f"{file.name} is missing"))
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as e:
        problems.append(_broken("unreadable", f"cannot read {file.name}: {e.strerror}"))
        return None
    except (ValueError, UnicodeDecodeError) as e:
        problems.append(_broken("bad_json", f"{file.name} is not valid JSON ({e})"))
        return None
    if not isinstance(data, dict):
        problems.append(_broken("bad_json", f"{file.name} is not a JSON object"))
        return None
    return data


def _check_config(config: dict[str, Any]) -> list[Problem]:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        return [_broken("no_model_type", "config.json has no model_type")]
    if not model_type_supported(model_type):
        return [_broken("unsupported", f"model_type {model_type!r} is not supported by mlx-lm")]
    return []


def _check_kind(root: Path, config: dict[str, Any], encoder: bool) -> list[Problem]:
    if _is_vision(config):
        return _check_vision(root, config)
    return _check_encoder(config) if encoder else _check_config(config)


def _is_encoder(root: Path, config: dict[str, Any]) -> bool:
    spec = embedding_spec(root, config)  # as backend.loader reads it
    return spec is not None and spec.encoder and not _is_vision(config)


def _check_encoder(config: dict[str, Any]) -> list[Problem]:
    """An encoder embedding model runs through mlx-embeddings (the `embeddings` extra), or
    through mlxd's own network (OWN_ENCODERS), if its class computes its variant."""
    model_type = str(config.get("model_type", ""))
    refusal = encoder_refusal(config)
    if refusal is not None:
        return [_broken("unsupported", f"{model_type} checkpoint not served: {refusal}")]
    if runs_own_network(config):
        return []
    package = _package_dir("mlx_embeddings")
    if package is None:
        return [
            _broken(
                "no_embeddings_extra",
                "an encoder embedding model needs mlx-embeddings: pip install 'mlxd[embeddings]'",
            )
        ]
    if not (package / "models" / f"{encoder_module(model_type)}.py").is_file():
        return [
            _broken("unsupported", f"model_type {model_type!r} is not supported by mlx-embeddings")
        ]
    return []


def _is_vision(config: dict[str, Any]) -> bool:
    return isinstance(config.get("vision_config"), dict)  # as backend.vision reads it


PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


def _check_vision(root: Path, config: dict[str, Any]) -> list[Problem]:
    """A vision checkpoint runs through mlx-vlm (the `vision` extra) with its processor files."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        return [_broken("no_model_type", "config.json has no model_type")]
    family = vision_family(config)
    if family is not None and family.refused:  # the loader refuses it: say so before loading
        return [_broken("unsupported", f"{family.name} is not served: {family.refused}")]
    vlm = _package_dir("mlx_vlm")
    if vlm is None:
        return [
            _broken("no_vision_extra", "a vision model needs mlx-vlm: pip install 'mlxd[vision]'")
        ]
    if not (vlm / "models" / model_type.replace("-", "_")).is_dir():
        return [_broken("unsupported", f"model_type {model_type!r} is not supported by mlx-vlm")]
    if not any((root / name).is_file() for name in PROCESSOR_FILES):
        names = " or ".join(PROCESSOR_FILES)
        return [_broken("no_processor", f"a vision model without its image processor ({names})")]
    return []


def _check_remote_code(
    config: dict[str, Any] | None, tok_config: dict[str, Any] | None
) -> list[Problem]:
    out = []
    if config and config.get("model_file") is not None:
        out.append(
            Problem(
                Severity.REFUSED,
                "model_file",
                f"config.json asks to run custom code ({config['model_file']!r})",
            )
        )
    own = config is not None and runs_own_network(config)
    shipped = (("config.json", None if own else config), ("tokenizer_config.json", tok_config))
    for name, data in shipped:
        if data and data.get("auto_map"):
            out.append(
                Problem(
                    Severity.REFUSED,
                    "auto_map",
                    f"{name} has auto_map (custom code shipped with the model)",
                )
            )
    return out


def _check_partial(path: Path) -> list[Problem]:
    """Interrupted pulls: `.incomplete` blobs, or files the recorded tree lists but the
    snapshot lacks."""
    repo = repo_for_snapshot(path)
    if repo is None:
        return []
    out = [
        Problem(
            Severity.INCOMPLETE,
            "partial_download",
            f"partial download in the cache ({b.name}); run `mlxd pull {repo.repo_id}`",
        )
        for b in repo.incomplete_blobs()
    ]
    expected = expected_files(repo, path.name) or {}
    missing = [n for n in expected if F.wanted(n) and not os.path.lexists(path / n)]
    if missing:
        out.append(
            Problem(
                Severity.INCOMPLETE,
                "missing_files",
                f"{len(missing)} file(s) not downloaded yet (e.g. {missing[0]}); "
                f"run `mlxd pull {repo.repo_id}`",
            )
        )
    return out


def _check_links(root: Path, names: list[Path]) -> list[Problem]:
    return [
        _broken("missing_blob", f"{_rel(root, p)} points to a missing blob")
        for p in names
        if p.is_symlink() and not p.exists()
    ]


def _check_weights(
    root: Path, names: list[Path], skip: set[Path]
) -> tuple[list[SafetensorsHeader], list[Problem]]:
    shards = [p for p in names if p.name.endswith(".safetensors") and p.exists()]
    if not shards:
        if any(F.is_pickle(p.name) for p in names):
            return [], [
                Problem(
                    Severity.REFUSED,
                    "pickle_only",
                    "weights are pickle files only (*.bin/*.pt); no safetensors",
                )
            ]
        return [], [_broken("no_weights", "no *.safetensors weights")]
    problems: list[Problem] = []
    problems += _check_index(root, {_rel(root, p) for p in shards}, skip)
    headers = []
    for shard in shards:
        if shard in skip:
            continue
        try:
            headers.append(read_header(shard))
        except ModelBroken as e:
            problems.append(_broken("bad_safetensors", e.message))
    return headers, problems


def _check_index(root: Path, present: set[str], skip: set[Path]) -> list[Problem]:
    problems: list[Problem] = []
    index = _load_json(root / "model.safetensors.index.json", problems, skip, required=False)
    if index is None:
        return problems
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict):
        return [_broken("bad_index", "model.safetensors.index.json has no weight_map")]
    missing = sorted(set(map(str, weight_map.values())) - present)
    if missing:
        problems.append(
            _broken(
                "missing_shard", f"shard(s) listed in the index are missing: {', '.join(missing)}"
            )
        )
    return problems


def _check_tokenizer(root: Path, skip: set[Path], deep: bool) -> list[Problem]:
    tok = root / "tokenizer.json"
    if tok.exists() and tok not in skip:
        problems: list[Problem] = []
        if _load_json(tok, problems, skip, required=True) is not None and deep:
            problems += _load_tokenizer(tok)
        return problems
    alternatives = ["tokenizer.model", "vocab.json", "tokenizer.tiktoken"]
    if any((root / a).exists() for a in alternatives) or list(root.glob("*.tiktoken")):
        return []
    if tok in skip:
        return []
    return [_broken("no_tokenizer", "no tokenizer files (tokenizer.json, tokenizer.model, ...)")]


def _check_binding(path: Path) -> list[Problem]:
    from mlxd.backend.dry_load import weight_mismatch

    reason = weight_mismatch(path)
    if reason is None:
        return []
    return [_broken("incompatible_weights", f"the weights do not fit the architecture: {reason}")]


def _load_tokenizer(tok: Path) -> list[Problem]:
    from tokenizers import Tokenizer  # Rust parser: loads data, runs no model code

    try:
        Tokenizer.from_file(str(tok))
    except Exception as e:  # noqa: BLE001 - any failure means it does not load
        reason = one_line(e, with_type=False)
        return [_broken("bad_tokenizer", f"tokenizer.json does not load: {reason}")]
    return []


def model_type_supported(model_type: str) -> bool:
    """True if mlx-lm has `models/<model_type>.py` (after its own remapping table)."""
    models_dir = _mlx_lm_dir() / "models"
    mapped = _remapping().get(model_type, model_type)
    return (models_dir / f"{mapped.replace('-', '_')}.py").exists()


@lru_cache(maxsize=1)
def _mlx_lm_dir() -> Path:
    return _package_dir("mlx_lm") or Path("/nonexistent")


@lru_cache(maxsize=4)
def _package_dir(name: str) -> Path | None:
    # find_spec locates the package without importing it (importing mlx_lm takes seconds).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=1)
def _remapping() -> dict[str, str]:
    """mlx_lm.utils.MODEL_REMAPPING read from source (again, to avoid importing mlx_lm)."""
    try:
        tree = ast.parse((_mlx_lm_dir() / "utils.py").read_text())
    except (OSError, SyntaxError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MODEL_REMAPPING" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return {str(k): str(v) for k, v in value.items()}
    return {}
