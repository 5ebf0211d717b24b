"""CacheDir: the disk tier's directory holds only what it wrote, and nothing is reached
through a link."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxd.backend.prefix.cache_dir import MARKER, CacheDir
from mlxd.errors import InvalidRequest

FOLDER = "a" * 32


def written(files: CacheDir, tmp: Path, content: bytes = b"x" * 10) -> str:
    temp = files.temp_path()
    temp.write_bytes(content)
    name = f"{FOLDER}/{'b' * 63}{len(files.names(FOLDER))}.safetensors"
    files.commit(temp, name)
    return name


def test_a_new_or_empty_directory_is_taken_and_marked(tmp_path: Path) -> None:
    files = CacheDir(tmp_path / "new")
    assert (tmp_path / "new" / MARKER).is_file() and files.nbytes == 0
    name = written(files, tmp_path)
    again = CacheDir(tmp_path / "new")  # the marker lists what it wrote
    assert again.names(FOLDER) == [name] and again.nbytes == 10


@pytest.mark.parametrize(
    "make",
    [
        lambda root: (root / "model.safetensors").write_bytes(b"weights"),
        lambda root: (root / "tiny").mkdir(),
        lambda root: (root / ("c" * 32)).symlink_to(root.parent, target_is_directory=True),
        lambda root: (root / ("c" * 32)).mkdir() or (root / ("c" * 32) / "notes").write_text(""),
    ],
    ids=["file", "folder", "link", "other-name"],
)
def test_a_directory_holding_anything_else_is_refused(tmp_path: Path, make) -> None:
    root = tmp_path / "dir"
    root.mkdir()
    make(root)
    with pytest.raises(InvalidRequest, match="which mlxd did not write"):
        CacheDir(root)
    assert not (root / MARKER).exists()


def test_an_earlier_tiers_files_are_adopted(tmp_path: Path) -> None:
    (tmp_path / FOLDER).mkdir()
    old = tmp_path / FOLDER / ("d" * 64 + ".safetensors")
    old.write_bytes(b"12345")
    files = CacheDir(tmp_path)
    assert files.names(FOLDER) == [f"{FOLDER}/{old.name}"] and files.nbytes == 5


def test_a_marker_naming_files_elsewhere_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    root = tmp_path / "dir"
    CacheDir(root)
    listed = [["../victim", 7], [f"{FOLDER}/../../victim", 7]]
    (root / MARKER).write_text(json.dumps({"format": "mlxd-prefix-dir-1", "files": listed}))
    files = CacheDir(root)
    assert files.nbytes == 0 and files.oldest() is None
    (root / MARKER).write_text("not json")
    with pytest.raises(InvalidRequest, match="not a prefix cache marker"):
        CacheDir(root)
    assert victim.read_text() == "keep me"


def test_a_folder_that_became_a_link_is_never_entered(tmp_path: Path) -> None:
    root, outside = tmp_path / "dir", tmp_path / "outside"
    files = CacheDir(root)
    name = written(files, tmp_path)
    (root / FOLDER).rename(outside)
    (root / FOLDER).symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError):
        files.open(name)
    files.delete(name)  # forgotten, not removed through the link
    assert (outside / name.split("/")[1]).exists() and files.nbytes == 0
    with pytest.raises(OSError):
        written(files, tmp_path)
    assert len(list(outside.iterdir())) == 1 and not list(root.glob(".tmp-*"))
