"""Arrow ↔ numpy through the buffers (curate.core.arrow): the values pyarrow's own conversions give, without pandas."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from curate.core.arrow import false_filled, from_numpy, strings, to_numpy


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint64, np.float32, np.float64, bool])
def test_round_trips_equal_pyarrow_conversions(dtype: type) -> None:
    values = (np.random.default_rng(0).random(37) * 100).astype(dtype)
    ours = from_numpy(values)
    assert ours.equals(pa.array(values)) and ours.null_count == 0
    for part in (ours, ours.slice(5), ours.slice(3, 20), ours.slice(37)):  # offsets inside a bitmap byte too
        np.testing.assert_array_equal(to_numpy(part), part.to_numpy(zero_copy_only=False))
        assert to_numpy(part).dtype == part.to_numpy(zero_copy_only=False).dtype


def test_from_numpy_casts_to_the_type_asked_and_checks_its_input() -> None:
    assert from_numpy(np.arange(4), pa.int32()).equals(pa.array([0, 1, 2, 3], pa.int32()))
    assert from_numpy(np.arange(6)[::2]).to_pylist() == [0, 2, 4]  # a strided view is copied
    with pytest.raises(ValueError, match="1-D"):
        from_numpy(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="not a fixed-width number type"):
        from_numpy(np.arange(3), pa.string())


def test_nulls_are_filled_only_when_asked() -> None:
    column = pa.array([1, None, 3, None, 5], pa.int16())
    with pytest.raises(ValueError, match="null value"):
        to_numpy(column)
    np.testing.assert_array_equal(to_numpy(column.slice(1), null=-1), [-1, 3, -1, 5])
    np.testing.assert_array_equal(to_numpy(pa.array([True, None, False]), null=True), [True, True, False])
    chunked = pa.chunked_array([pa.array([1.5, None]), pa.array([2.5])])
    np.testing.assert_array_equal(to_numpy(chunked, null=0.0), [1.5, 0.0, 2.5])
    with pytest.raises(TypeError, match="not a fixed-width number type"):
        to_numpy(pa.array(["a"]))


def test_strings_equal_pa_array() -> None:
    for values in (["a", None, "héllo", ""], [], [None], ["日本語", "x" * 1000]):
        assert strings(values).equals(pa.array(values, pa.string()))
    assert strings([b"raw"]).equals(pa.array([b"raw"], pa.string()))  # other values: pyarrow's own conversion


def test_false_filled_is_fill_null_false() -> None:
    mask = pc.less(strings(["a", None, "c", "a"]), strings(["b", "b", None, "a"]))
    assert false_filled(mask).to_pylist() == pc.fill_null(mask, False).to_pylist() == [True, False, False, False]


def test_the_helpers_never_import_pandas() -> None:
    code = ("import sys, numpy as np, pyarrow.compute as pc\n"
            "from curate.core.arrow import false_filled, from_numpy, strings, to_numpy\n"
            "a = from_numpy(np.arange(10)); to_numpy(a.slice(2)); to_numpy(from_numpy(np.ones(9, bool)))\n"
            "s = strings(['a', None]); false_filled(pc.equal(s, s)); to_numpy(pc.is_valid(s))\n"
            "print('pandas' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"
