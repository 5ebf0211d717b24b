"""What backend/tokenizer/ (lazy_transformers.py, checkpoint_tokenizer.py) relies on in the
pinned mlx-lm and transformers. A failure here means an upgrade changed one of them: re-read
the module against the new sources (which names mlx-lm imports at import time, which tokenizer
classes transformers loads straight from tokenizer.json), fix it, then update the pins."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import mlx_lm

from mlxd.backend.tokenizer import lazy_transformers
from mlxd.backend.tokenizer.checkpoint_tokenizer import GENERIC_CLASSES, OWN_CLASS_MODEL_TYPES

TRANSFORMERS_CHECKED = "5.24.0"  # the transformers CheckpointTokenizer was compared with


def test_transformers_is_the_version_the_tokenizer_was_checked_against() -> None:
    assert version("transformers") == TRANSFORMERS_CHECKED, (
        "transformers is not the checked version: re-check "
        "backend/tokenizer/checkpoint_tokenizer.py (the steps of "
        "TokenizersBackend.__init__) and the stand-ins, then TRANSFORMERS_CHECKED"
    )


def _import_time_transformers_names(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every `from transformers... import name` outside functions."""
    found = set()
    for node in _outside_functions(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
            found |= {(str(node.module), alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "transformers" for a in node.names), path
    return found


def _outside_functions(tree: ast.AST) -> list[ast.AST]:
    nodes, todo = [], [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return nodes


def test_mlx_lm_imports_only_the_stand_in_names_at_import_time() -> None:
    root = Path(mlx_lm.__file__).parent
    package_import = subprocess.run(
        [sys.executable, "-c", "import json, sys, mlx_lm, mlx_lm.generate, mlx_lm.utils; "
         "print(json.dumps([m for m in sys.modules if m.split('.')[0] == 'mlx_lm']))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    modules = json.loads(package_import.stdout)
    names = set()
    for module in modules:
        parts = module.split(".")[1:]
        path = root.joinpath(*parts, "__init__.py") if parts else root / "__init__.py"
        if not path.exists():
            path = root.joinpath(*parts[:-1], parts[-1] + ".py")
        names |= _import_time_transformers_names(path)
    stood_in = {(m, n) for m, ns in lazy_transformers._MODULES.items() for n in ns}
    assert names == stood_in, "mlx-lm's import-time transformers names changed"


def test_generic_tokenizer_classes_load_straight_from_tokenizer_json() -> None:
    from transformers.models.auto import tokenization_auto as auto
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    for name in GENERIC_CLASSES:
        assert auto.tokenizer_class_from_name(name) is TokenizersBackend, name
    generic = {"TokenizersBackend", "PythonBackend", "PreTrainedTokenizerFast"}
    generic |= {"MistralCommonBackend"}
    replaced = {
        model_type
        for model_type in auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
        if (auto.TOKENIZER_MAPPING_NAMES.get(model_type) or "TokenizersBackend").removesuffix(
            "Fast"
        )
        not in generic
    }
    assert replaced == OWN_CLASS_MODEL_TYPES


FRESH_PROCESS = """
import importlib.util, sys
from mlxd.backend.native import prepare_mlx
prepare_mlx()
from mlxd.backend.tokenizer import lazy_transformers as lazy
assert importlib.util.find_spec("mlx_lm") is not None  # a lookup is no import (store.health)
assert "mlx_lm" not in sys.modules
import mlx_lm.generate, mlx_lm.utils
from mlx_lm import tokenizer_utils
assert "transformers" not in sys.modules and "huggingface_hub.hf_api" not in sys.modules
assert tokenizer_utils.AutoTokenizer is lazy.AutoTokenizer
assert sys.modules["mlx_lm.generate"].PreTrainedTokenizer is lazy.PreTrainedTokenizer
assert mlx_lm.utils.snapshot_download is lazy.snapshot_download
from huggingface_hub import snapshot_download
assert snapshot_download is not lazy.snapshot_download
assert issubclass(tokenizer_utils.NewlineTokenizer, lazy.PreTrainedTokenizerFast)

transformers = lazy.real_transformers()
assert lazy.real_transformers() is transformers
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
assert tokenizer_utils.PreTrainedTokenizerBase is PreTrainedTokenizerBase
assert tokenizer_utils.PreTrainedTokenizerFast is transformers.PreTrainedTokenizerFast
assert sys.modules["mlx_lm.generate"].PreTrainedTokenizer is transformers.PreTrainedTokenizer
assert tokenizer_utils.AutoTokenizer is lazy.AutoTokenizer  # the stand-in stays
assert issubclass(tokenizer_utils.NewlineTokenizer, transformers.PreTrainedTokenizerFast)

# mlx-lm's NewlineTokenizer, registered while transformers was a stand-in, loads for real.
tokenizer = mlx_lm.utils.load_tokenizer(sys.argv[1])
assert type(tokenizer._tokenizer) is tokenizer_utils.NewlineTokenizer, type(tokenizer._tokenizer)
assert tokenizer.encode("a\\nb") == tokenizer.encode("a<n>b")  # its newline mapping
print("ok")
"""


def test_mlx_lm_imports_with_stand_ins_then_gets_the_real_classes(
    tiny_chat_model: Path, tmp_path: Path
) -> None:
    newline = tmp_path / "newline"
    newline.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (newline / name).write_bytes((tiny_chat_model / name).read_bytes())
    config = json.loads((newline / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "NewlineTokenizer"
    (newline / "tokenizer_config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(newline)], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
