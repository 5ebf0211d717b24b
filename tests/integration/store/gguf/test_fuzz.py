"""Untrusted files: a GGUF with corrupted bytes imports cleanly or fails with one MlxdError,
never another exception, and never leaves anything in the store when it fails."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlxd.errors import MlxdError
from mlxd.store.gguf.importer import import_gguf
from tests.integration.store.gguf.gguf_builder import GgufFactory


@pytest.fixture(scope="module")
def pristine(tiny_gguf: GgufFactory) -> bytes:
    return tiny_gguf("Q4_1").path.read_bytes()


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_importer_corrupted_bytes(pristine: bytes, tmp_path_factory, data) -> None:
    header_end = 24_000  # metadata and tensor infos live here; weights follow
    flips = data.draw(
        st.lists(
            st.tuples(st.integers(0, min(header_end, len(pristine)) - 1), st.integers(0, 255)),
            min_size=1,
            max_size=4,
        )
    )
    corrupt = bytearray(pristine)
    for position, value in flips:
        corrupt[position] = value
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "corrupt.gguf"
    path.write_bytes(bytes(corrupt))
    store = folder / "store"
    try:
        import_gguf(path, "fuzz", store=store)
    except MlxdError as e:
        assert "\n" not in e.message.strip()
        assert not (store / "fuzz").exists()
        assert not store.exists() or not any(store.iterdir())
