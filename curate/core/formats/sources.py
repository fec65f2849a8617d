"""The ``source`` of a record that carries none: named after its input file, less any shard number.

Every stats file is broken down per source, so a dataset split into numbered shards should be
one source, not one per shard: img2dataset writes ``00000.tar … 08499.tar``, Hugging Face
``train-00000-of-00042.parquet``, WebDataset tools ``laion-000123.tar``. The rule
(:func:`default_source`):

* a stem without a shard number is the source (``coyo.jsonl`` → ``coyo``, ``cc12m.parquet`` → ``cc12m``);
* a shard number is a trailing run of digits, alone or after ``-``, ``_`` or ``.``, optionally
  followed by ``-of-`` and a count: ``laion-000123`` → ``laion``, ``train-00000-of-00042`` → ``train``;
  digits glued to a name stay (``coco2017``);
* when nothing is left, or only a generic word (:data:`GENERIC_NAMES`: ``train``, ``data``,
  ``shard``…), the nearest enclosing folder whose name is not generic names it instead, up to three
  levels up: ``laion400m/00000.tar`` → ``laion400m``, ``the_cauldron/vqav2/train-00000-of-00002.parquet``
  → ``vqav2``, ``coyo/data/train-00000-of-00128.parquet`` → ``coyo``;
* without such a folder, the stripped name (``train``), else the nearest folder's name (``data/train/0000.parquet``
  → ``train``), else the stem.

A row's own ``source`` (or ``data_source``) always wins over this rule.

A row without an ``id`` is ``<stem>:<row>``, and when the source comes from a folder the folder's name
leads (:func:`default_id_prefix`): the subsets of ``the_cauldron`` all hold a ``train-00000-of-0000N.parquet``,
and their rows would otherwise share ids (every subset after the first errored ``duplicate_id``).
"""

from __future__ import annotations

import functools
import os
import re

from curate.core.io import as_path, is_url

#: Names that say which split or shard a file is, not which dataset: a source is looked for above them.
GENERIC_NAMES = frozenset({"train", "training", "test", "testing", "val", "valid", "validation", "dev", "eval",
                           "data", "dataset", "datasets", "default", "shard", "shards", "part", "parts", "chunk",
                           "chunks", "split", "splits", "parquet", "tars", "webdataset", "wds", "output", "images"})
_SHARD = re.compile(r"(?:(?P<name>.*?)[-_.])?\d+(?:-of-\d+)?")
_LEVELS = 3


def default_source(path: str) -> str:
    """The source of the records of input file ``path`` that have none (see the module docstring)."""
    return _names(path)[0]


def default_id_prefix(path: str) -> str:
    """What the id of a row without one starts with (``<prefix>:<row>``): the file's stem, after the folder that
    names its source when the stem alone does not (``vqav2/train-00000-of-00002``,
    ``laion400m/00000``), so that the same file names in two datasets' folders give different ids."""
    return _names(path)[1]


@functools.lru_cache(maxsize=4096)
def _names(path: str) -> tuple[str, str]:
    p = as_path(path if is_url(path) else os.path.abspath(path))
    stem = p.stem
    match = _SHARD.fullmatch(stem)
    if match is None:
        return stem, stem
    name = match.group("name") or ""
    if name and name.lower() not in GENERIC_NAMES:
        return name, stem
    folder, generic = p.parent, ""
    for _ in range(_LEVELS):
        label = folder.name
        if not label or ":" in label:  # the file system's root, or a URL's scheme
            break
        if label.lower() not in GENERIC_NAMES:
            return label, f"{label}/{stem}"
        generic = generic or label
        folder = folder.parent
    return name or generic or stem, stem
