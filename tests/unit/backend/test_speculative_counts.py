"""Per-row speculation counts (backend.speculative.Drafts): what one step reports per uid."""

from __future__ import annotations

from mlxd.backend.outputs import DraftCount
from mlxd.backend.speculative import Drafts


def test_counts_are_per_row_summed_within_a_step_and_taken_once() -> None:
    drafts = Drafts()
    drafts.record(7, 4, 3)
    drafts.record(9, 0, 0)  # a row without a draft this step reports nothing
    drafts.record(7, 2, 2)
    drafts.record(8, 4, 0)
    assert drafts.take_counts() == {7: DraftCount(6, 5), 8: DraftCount(4, 0)}
    assert drafts.take_counts() == {}
