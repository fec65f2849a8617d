"""Loading the concept matrix: float32, bad rows refused, empty rows left out, the same from any layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from curate.balance.index import _LOADED_CONCEPTS, _load_checked, concept_matrix
from curate.core.errors import UserError


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_the_matrix_loads_in_blocks_as_one_conversion_would(tmp_path: Path, dtype: type) -> None:
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((1000, 24)).astype(dtype)
    matrix[[3, 500, 999]] = 0  # concepts that could not be embedded
    np.save(tmp_path / "c.npy", matrix)
    _LOADED_CONCEPTS.clear()
    vectors, kept, total = concept_matrix(tmp_path / "c.npy")
    expect = matrix.astype(np.float32)
    assert total == 1000 and vectors.dtype == np.float32
    np.testing.assert_array_equal(kept, np.flatnonzero(expect.any(axis=1)))
    np.testing.assert_array_equal(vectors, expect[kept])
    mapped = np.load(tmp_path / "c.npy", mmap_mode="r")
    for rows in (1, 7, 1000, 4096):  # blocks that divide the rows or not, read from the file or sliced
        for source in (mapped, np.asarray(mapped)):
            full, bad, used = _load_checked(source, rows=rows)
            np.testing.assert_array_equal(full, expect)
            assert bad == 0 and used.tolist() == expect.any(axis=1).tolist()


def test_rows_with_nan_or_infinity_are_refused_and_counted(tmp_path: Path) -> None:
    matrix = np.ones((300, 8), np.float16)
    matrix[10, 2] = np.nan
    matrix[250, 0] = np.inf
    matrix[251, :] = -np.inf
    np.save(tmp_path / "bad.npy", matrix)
    _, bad, _ = _load_checked(np.load(tmp_path / "bad.npy", mmap_mode="r"), rows=64)
    assert bad == 3
    _LOADED_CONCEPTS.clear()
    with pytest.raises(UserError, match="3 row\\(s\\) hold NaN or infinite values"):
        concept_matrix(tmp_path / "bad.npy")


def test_the_exact_index_is_the_one_the_matrix_was_loaded_into(tmp_path: Path) -> None:
    import gc

    import faiss

    from curate.balance.index import exact_index

    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((300, 16)).astype(np.float16)
    matrix[[0, 7, 299]] = 0  # left out: the others move up inside the index's storage
    np.save(tmp_path / "c.npy", matrix)
    _LOADED_CONCEPTS.clear()
    vectors, kept, _ = concept_matrix(tmp_path / "c.npy")
    index = exact_index(vectors)
    assert exact_index(vectors) is index and index.ntotal == len(kept) == 297  # no copy of the matrix
    expect = matrix.astype(np.float32)[kept]
    _LOADED_CONCEPTS.clear()
    del index
    gc.collect()  # the array alone keeps the index (and its storage) alive
    np.testing.assert_array_equal(vectors, expect)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    reference = faiss.IndexFlatIP(16)
    reference.add(expect)
    for got, want in zip(exact_index(vectors).search(queries, 5), reference.search(queries, 5)):
        np.testing.assert_array_equal(got, want)
    copy = exact_index(vectors.copy())  # any other array: an index of its own
    assert copy is not exact_index(vectors) and copy.ntotal == 297


def test_compacting_in_place_keeps_the_rows_in_order_across_blocks() -> None:
    from curate.balance.index import _compact

    full = np.arange(100 * 3, dtype=np.float32).reshape(100, 3)
    keep = np.flatnonzero(np.random.default_rng(2).random(100) < 0.6)
    expect = full[keep].copy()
    _compact(full, keep, rows=7)
    np.testing.assert_array_equal(full[:len(keep)], expect)
