"""`health` looks at the weights themselves (issue 11, item 10): an unknown tensor dtype and
a tensor the architecture needs but the file lacks are reported, not "ok"."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from mlxd.errors import ModelBroken
from tests.integration.store.clirun import mlxd


def rewrite_header(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header = edit(header)
    new = json.dumps(header).encode()
    new += b" " * (-len(new) % 8)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n :])


def unknown_dtype(header: dict) -> dict:
    name = next(k for k in header if k != "__metadata__" and header[k]["dtype"] == "F32")
    header[name]["dtype"] = "Q9_X"  # no such safetensors dtype
    return header


def missing_tensor(header: dict) -> dict:
    name = next(k for k in sorted(header) if k.endswith("q_proj.weight"))
    del header[name]  # its bytes stay: the file is consistent, the model is not
    return header


@pytest.mark.parametrize(
    ("edit", "code", "words"),
    [
        (unknown_dtype, "bad_safetensors", "Q9_X"),
        (missing_tensor, "incompatible_weights", "q_proj"),
    ],
)
def test_health_reports_weights_the_model_cannot_use(
    tmp_path: Path,
    tiny_chat_model: Path,
    edit,
    code: str,
    words: str,  # type: ignore[no-untyped-def]
) -> None:
    model = shutil.copytree(tiny_chat_model, tmp_path / "mlxd" / "models" / "bad")
    rewrite_header(model / "model.safetensors", edit)
    result = mlxd(tmp_path, "health", "bad", "--json")
    assert result.code == ModelBroken.exit_code, result.stdout
    (report,) = result.json()
    assert report["status"] == "broken"
    problem = next(p for p in report["problems"] if p["code"] == code)
    assert words in problem["message"]
