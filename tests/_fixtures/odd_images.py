"""Session fixture: a folder of odd and broken image files (:mod:`curate.fixtures.odd_images`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.fixtures.odd_images import write_big_photos, write_odd_images


@pytest.fixture(scope="session")
def odd_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the odd image files (see :func:`curate.fixtures.odd_images.odd_image_bytes`)."""
    return write_odd_images(tmp_path_factory.mktemp("odd-images"))


@pytest.fixture(scope="session")
def big_photos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """12 MP and 50 MP photos and their copies (:func:`curate.fixtures.odd_images.write_big_photos`), made once."""
    return write_big_photos(tmp_path_factory.mktemp("big-photos"))
