"""Image paths of records made absolute against their file's folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from curate.core.formats.rows import RecordInvalid, image_item


@pytest.mark.parametrize(("given", "base", "want"), [
    ("images/a.jpg", "/data/set", "/data/set/images/a.jpg"),
    ("./images//a.jpg", "/data/set/", "/data/set/images/a.jpg"),
    ("../other/a.jpg", "/data/set", "/data/other/a.jpg"),
    ("a.jpg", "file:///data/set", "/data/set/a.jpg"),
    ("/abs/./x//a.jpg", "/data/set", "/abs/x/a.jpg"),
    ("/abs/../a.jpg", "/data/set", "/abs/../a.jpg"),  # an absolute path is kept as given (tidied like a Path)
    ("file:///abs/a.jpg", "/data/set", "/abs/a.jpg"),
    ("file://rel/a.jpg", "/data/set", "/data/set/rel/a.jpg"),
    ("s3://bucket/a.jpg", "/data/set", "s3://bucket/a.jpg"),
    ("images/./a.jpg", "s3://bucket/set/", "s3://bucket/set/images/a.jpg"),
    ("images/a.jpg", Path("/data/set"), "/data/set/images/a.jpg"),
])
def test_paths_are_absolute_against_the_record_folder(given: str, base: str | Path, want: str) -> None:
    assert image_item(given, "images", base) == want


def test_relative_base_folders_stay_relative_and_tidy(tmp_path: Path) -> None:
    assert image_item("x/../y.jpg", "images", "data/./set") == os.path.join("data", "set", "y.jpg")
    with pytest.raises(RecordInvalid):
        image_item("", "images", "/data")
