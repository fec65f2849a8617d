"""The concept matrix file: ``concepts.npy`` (``V×D`` float16, row ``i`` = vocabulary line ``i + 1``) and its sidecar.

Written by ``curate vocab embed`` (:mod:`curate.balance.vocab.embed`), read by
``curate tag`` (:mod:`curate.balance.tag`). The sidecar ``concepts.json`` says what
the matrix holds: model fingerprint, vocabulary hash, template, scripts, rows
embedded and skipped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from curate.core.errors import UserError
from curate.core.io import atomic_path


def sidecar_path(npy: str | os.PathLike[str]) -> Path:
    """``concepts.npy`` → ``concepts.json`` (what the matrix holds: model, vocab, skipped...)."""
    return Path(npy).with_suffix(".json")


def copy_concepts(src: Path, dst: Path) -> None:
    """Put the cached matrix at ``dst`` (hard link when possible, else an atomic copy)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() and dst.samefile(src):
        return
    with atomic_path(dst) as tmp:  # removed again if the copy fails (a full disk)
        os.unlink(tmp)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


def load_concepts(path: str | os.PathLike[str]) -> np.ndarray:
    """Load a concept matrix (``V×D``, any float dtype) with a clear error for bad files."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--concepts {path}: no such file; make it with curate vocab embed --vocab FILE --out {path}")
    try:
        matrix = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as exc:
        raise UserError(f"--concepts {path}: not a .npy matrix ({exc})") from None
    if matrix.ndim != 2 or matrix.shape[0] == 0 or not np.issubdtype(matrix.dtype, np.floating):
        raise UserError(f"--concepts {path}: expected a V×D float matrix, got shape {matrix.shape} {matrix.dtype}")
    return matrix
