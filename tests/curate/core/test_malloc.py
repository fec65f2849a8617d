"""small_numpy_pages: NumPy's huge-page advice off inside the block, the previous setting back after."""

from __future__ import annotations

from curate.core.malloc import small_numpy_pages


def test_small_numpy_pages_turns_the_huge_page_advice_off_and_back() -> None:
    from numpy._core import multiarray

    previous = multiarray._set_madvise_hugepage(True)
    try:
        with small_numpy_pages():
            inside = multiarray._set_madvise_hugepage(False)  # returns the setting in force
        after = multiarray._set_madvise_hugepage(True)
    finally:
        multiarray._set_madvise_hugepage(previous)
    assert inside is False and after is True
