"""Bad GGUF input: one clear MlxdError, and nothing left behind in the store."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from mlxd.errors import InvalidRequest, MlxdError, ModelBroken, ModelNotFound
from mlxd.store.gguf.importer import import_gguf
from tests.hostile import gguf_lying_array, gguf_lying_counts, gguf_nested_arrays
from tests.integration.store.gguf.gguf_builder import GgufFactory


def store_entries(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir()) if store.exists() else []


@pytest.mark.parametrize("keep", [3, 10, 200, 0.5, -1])
def test_importer_truncated_gguf(
    keep: float, tiny_gguf: GgufFactory, tmp_path: Path, store: Path
) -> None:
    data = tiny_gguf("Q4_0").path.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[:cut])
    with pytest.raises(ModelBroken, match="cut.gguf|not a GGUF"):
        import_gguf(bad, "cut")
    assert store_entries(store) == []


def test_importer_not_a_gguf(tmp_path: Path, store: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_text("this is plain text, not weights\n")
    with pytest.raises(ModelBroken, match="not a GGUF file"):
        import_gguf(bad)
    assert store_entries(store) == []


def test_importer_missing_file_and_directory(tmp_path: Path, store: Path) -> None:
    with pytest.raises(ModelNotFound, match="no such file"):
        import_gguf(tmp_path / "absent.gguf")
    with pytest.raises(InvalidRequest, match="not a file"):
        import_gguf(tmp_path)
    assert store_entries(store) == []


def test_importer_huge_length_fields_fail_fast(tmp_path: Path, store: Path) -> None:
    """A corrupt array length must not make the reader loop over billions of empty items."""
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    kv = struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, 0, 1 << 60)  # uint8[2**60]
    bad = tmp_path / "huge.gguf"
    bad.write_bytes(header + kv + b"\0" * 64)
    with pytest.raises(ModelBroken, match="truncated or corrupt"):
        import_gguf(bad)
    assert store_entries(store) == []


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda p: gguf_lying_array(p), "1099511627776 array items cannot fit in the 1048576"),
        (lambda p: gguf_lying_array(p, items=(1 << 20) + 1), "1048577 array items cannot fit"),
        (lambda p: gguf_lying_counts(p, 0, 1 << 40), "metadata entries cannot fit"),
        (lambda p: gguf_lying_counts(p, 1 << 40, 0), "tensors cannot fit"),
        (lambda p: gguf_nested_arrays(p), "nested deeper than 8 levels"),
    ],
)
def test_importer_lying_sizes_are_refused_before_any_loop(
    write, message: str, tmp_path: Path, store: Path
) -> None:
    """Sizes are checked against the bytes left before a loop walks them (a 2^40-item array
    in an 8 MB file ran 75 s and peaked at 2.5 GB), and nesting is bounded (depth 2000 was
    a RecursionError)."""
    bad = write(tmp_path / "lying.gguf")
    with pytest.raises(ModelBroken, match=message):
        import_gguf(bad)
    assert store_entries(store) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"arch": "qwen2"}, "unsupported architecture 'qwen2'"),
        ({"tokenizer_model": "bert"}, "unsupported GGUF tokenizer 'bert'"),
        ({"tokenizer_model": "llama"}, "lacks required metadata 'tokenizer.ggml.scores'"),
        ({"overrides": (("num_hidden_layers", 1),)}, "unexpected tensor 'blk.1"),
        ({"overrides": (("num_hidden_layers", 3),)}, "lacks 9 tensors"),
        (
            {"overrides": (("intermediate_size", 96),)},
            r"ffn_down.weight has shape \[64, 128\], expected \[64, 96\]",
        ),
        ({"overrides": (("num_key_value_heads", 3),)}, "head counts are inconsistent"),
    ],
)
def test_importer_unsupported_or_inconsistent(
    options: dict, message: str, tiny_gguf: GgufFactory, store: Path
) -> None:
    with pytest.raises(ModelBroken, match=message):
        import_gguf(tiny_gguf("F32", **options).path, "bad")
    assert store_entries(store) == []


def test_importer_name_conflicts_and_force(tiny_gguf: GgufFactory, store: Path) -> None:
    first = import_gguf(tiny_gguf("F32").path, "tiny")
    marker = first.path / "marker"
    marker.write_text("the first import")
    with pytest.raises(InvalidRequest, match="already exists"):
        import_gguf(tiny_gguf("Q8_0").path, "tiny")
    assert marker.exists()
    again = import_gguf(tiny_gguf("Q8_0").path, "tiny", replace=True)
    assert again.path == first.path and not marker.exists()
    assert store_entries(store) == ["tiny"]


@pytest.mark.parametrize("name", ["../escape", ".hidden", "a/b", "", "x" * 101, "a..b"])
def test_importer_rejects_bad_names(name: str, tiny_gguf: GgufFactory, store: Path) -> None:
    with pytest.raises(InvalidRequest, match="invalid model name"):
        import_gguf(tiny_gguf("F32").path, name)
    assert store_entries(store) == []


def test_importer_rejects_bad_dtype(tiny_gguf: GgufFactory, store: Path) -> None:
    with pytest.raises(InvalidRequest, match="unsupported dtype"):
        import_gguf(tiny_gguf("F32").path, "tiny", dtype="int8")


def test_importer_interrupted_leaves_nothing(tiny_gguf: GgufFactory, store: Path) -> None:
    def interrupt(done: int, total: int, name: str) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_gguf(tiny_gguf("F32").path, "tiny", progress=interrupt)
    assert store_entries(store) == []


def test_importer_removes_temp_dirs_of_dead_imports(tiny_gguf: GgufFactory, store: Path) -> None:
    dead = store / ".import-999999999-0000"  # above any pid_max: that process cannot exist
    dead.mkdir(parents=True)
    (dead / "model.safetensors").write_bytes(b"half")
    import_gguf(tiny_gguf("F32").path, "tiny")
    assert store_entries(store) == ["tiny"]


def test_importer_unwritable_store(tiny_gguf: GgufFactory, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store should be")
    with pytest.raises(MlxdError, match="cannot write the model into"):
        import_gguf(tiny_gguf("F32").path, "tiny", store=blocker / "models")
