"""Timing logs: the fit recovers known coefficients, logs are read back and checked."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from curate.core.errors import UserError
from packer.cost import COEFFICIENT_FIELDS, COMPONENTS, CostModel, sample_components
from packer.timing import (
    TimingLog,
    describe_fit,
    fit_coefficients,
    is_timing_log,
    load_model,
    read_timing_log,
    sequence_components,
)

TRUE = {"per_token": 2e-5, "per_token_sq": 4e-9, "per_patch": 6e-6, "per_patch_sq": 3e-9}
OVERHEAD = 0.004


def measured_rows(n: int, seed: int, noise: float) -> dict[str, np.ndarray]:
    """Packed sequences of random composition, timed by a known model (times multiplied by 1 ± noise)."""
    rng = np.random.default_rng(seed)
    rows = {c: np.zeros(n) for c in COMPONENTS}
    for i in range(n):
        samples = int(rng.integers(1, 12))
        tokens = rng.integers(20, 1500, samples)
        images = rng.integers(0, 3, samples)
        owner = np.repeat(np.arange(samples), images)
        patches = rng.integers(16, 4096, owner.size)
        comps = sample_components(tokens, patches, owner).sum(axis=0)
        for c, v in zip(COMPONENTS, comps):
            rows[c][i] = v
    truth = sum(TRUE[f] * rows[c] for f, c in zip(COEFFICIENT_FIELDS, COMPONENTS)) + OVERHEAD
    rows["seconds"] = truth * (1 + rng.uniform(-noise, noise, n))
    return rows


def test_fit_recovers_known_coefficients() -> None:
    exact = fit_coefficients(measured_rows(300, seed=0, noise=0.0))
    for name, value in TRUE.items():
        assert exact["coefficients"][name] == pytest.approx(value, rel=1e-6)
    assert exact["per_sequence"] == pytest.approx(OVERHEAD, rel=1e-6)
    assert exact["rms_relative_error"] < 1e-8 and exact["r2"] == pytest.approx(1.0)
    noisy = fit_coefficients(measured_rows(400, seed=1, noise=0.05))
    for name, value in TRUE.items():
        assert noisy["coefficients"][name] == pytest.approx(value, rel=0.15)
    assert 0.01 < noisy["rms_relative_error"] < 0.05 and noisy["max_relative_error"] <= 0.06
    # a component that no row has cannot be fitted: its coefficient is 0 and it is named
    text_only = measured_rows(100, seed=2, noise=0.0)
    text_only["seconds"] -= TRUE["per_patch"] * text_only["patches"] + TRUE["per_patch_sq"] * text_only["patches_sq"]
    text_only["patches"][:] = 0
    text_only["patches_sq"][:] = 0
    fit = fit_coefficients(text_only)
    assert fit["unmeasured"] == ["patches", "patches_sq"] and fit["coefficients"]["per_patch"] == 0.0
    assert fit["coefficients"]["per_token"] == pytest.approx(TRUE["per_token"], rel=1e-6)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_written_log_is_read_back_and_fitted(tmp_path, suffix) -> None:
    rows = measured_rows(60, seed=3, noise=0.0)
    path = tmp_path / f"timings{suffix}"
    log = TimingLog(path)
    for i in range(60):  # one row as a training loop would add it: sample bounds and image grids
        tokens = int(rows["tokens"][i])
        log.add({"cu_seqlens": np.array([0, tokens]), "image_grid_thw": None}, rows["seconds"][i], step=i)
    written = log.write()
    table = pacsv.read_csv(written) if suffix == ".csv" else pq.read_table(written)
    assert table.column_names == [*COMPONENTS, "seconds", "sequences", "step"]
    assert table.column("step").to_pylist() == list(range(60))
    back = read_timing_log(written)
    np.testing.assert_array_equal(back["tokens"], rows["tokens"])
    np.testing.assert_array_equal(back["tokens_sq"], rows["tokens"] ** 2)  # one sample per row here
    model, report = load_model(written)
    assert isinstance(model, CostModel) and model.fitted and report["file"] == str(written)
    assert model.coefficients()[0] > 0 and "fitted to 60 timings" in describe_fit(report)


def test_sequence_components_of_a_packed_sequence() -> None:
    comps = sequence_components(np.array([0, 100, 130, 400]), np.array([[1, 4, 6], [2, 2, 2]]))
    assert comps == {"tokens": 400.0, "tokens_sq": 100.0 ** 2 + 30 ** 2 + 270 ** 2, "patches": 32.0,
                     "patches_sq": 24.0 ** 2 + 8 ** 2}
    assert is_timing_log("a/b.CSV") and is_timing_log("x.parquet") and not is_timing_log("model.yaml")
    with pytest.raises(UserError, match=".csv or .parquet"):
        TimingLog("timings.json")


def test_bad_logs_are_named(tmp_path) -> None:
    good = measured_rows(20, seed=4, noise=0.0)

    def write(name: str, columns: dict) -> str:
        path = tmp_path / name
        pacsv.write_csv(pa.table(columns), path)
        return str(path)

    missing = write("missing.csv", {k: v for k, v in good.items() if k != "patches_sq"})
    with pytest.raises(UserError, match="missing.csv.*missing patches_sq"):
        read_timing_log(missing)
    negative = {**good, "seconds": np.where(np.arange(20) == 5, -1.0, good["seconds"])}
    with pytest.raises(UserError, match="row 6: seconds is -1.0; expected a positive number"):
        read_timing_log(write("negative.csv", negative))
    with pytest.raises(UserError, match="3 rows; a fit needs at least 8"):
        read_timing_log(write("short.csv", {k: v[:3] for k, v in good.items()}))
    with pytest.raises(UserError, match="column tokens holds string"):
        read_timing_log(write("text.csv", {**good, "tokens": ["many"] * 20}))
    with pytest.raises(UserError, match="no such file"):
        read_timing_log(tmp_path / "absent.csv")
    flat = {**good, "seconds": np.full(20, 1e-9)}
    flat.update({c: np.zeros(20) for c in COMPONENTS})
    with pytest.raises(UserError, match="no cost to any component"):
        load_model(write("flat.csv", flat))
