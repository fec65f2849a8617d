"""Session fixtures: the bundled sample data, freshly generated.

Generating takes a few seconds (about 2-5 s on 2 cores), so every test session
gets its own fresh copy instead of reading the committed ``data/sample`` (which a
test compares with this copy, so the two cannot drift apart). Treat the folder as
read-only: copy what you want to modify.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.fixtures.sampledata import SampleDataInfo, make_sample_data


@pytest.fixture(scope="session")
def sample_data_info(tmp_path_factory: pytest.TempPathFactory) -> SampleDataInfo:
    """The generated sample data (seed 0) and what was written (counts, size, time)."""
    return make_sample_data(tmp_path_factory.mktemp("sample-data") / "sample", seed=0)


@pytest.fixture(scope="session")
def sample_data(sample_data_info: SampleDataInfo) -> Path:
    """Path of a freshly generated copy of the sample data (same content as ``data/sample``).

    Holds ``records.jsonl``, ``records.parquet``, ``llava.jsonl``, ``captions.jsonl``,
    ``images/``, ``rl/prompts.jsonl`` (+ ``rl/truth.jsonl``, ``rl/images/``) and ``bad/``
    (``records.jsonl``, ``empty.jsonl``, ``EXPECTED.json``). Read-only.
    """
    return sample_data_info.root
