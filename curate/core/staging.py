"""Staging folders: the local folder that stands for an output URL on this machine.

A run writing ``--out s3://...`` works in ``$CURATE_CACHE/remote/<hash of the URL>/``
(:mod:`curate.core.remote`); the folder names its URL in a hidden file, so every process of the
machine (worker processes, Ray actors) knows where its files go, and a folder inside it stands for
the same path under the URL.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from curate.core.io import curate_cache

#: The hidden file of a staging folder that names the URL it stands for.
URL_FILE = ".url"


def staging(url: str) -> Path:
    """The local folder that stands for ``url`` on this machine (``$CURATE_CACHE/remote/<hash>``)."""
    return curate_cache("remote") / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]


def staging_folder(url: str) -> Path:
    """:func:`staging` of ``url``, made, with its URL recorded in it (see :func:`url_of`)."""
    local = staging(url)
    local.mkdir(parents=True, exist_ok=True)
    mark = local / URL_FILE
    text = url.rstrip("/")
    if not mark.is_file() or mark.read_text(encoding="utf-8") != text:
        mark.write_text(text, encoding="utf-8")
    return local


def url_of(local: str | os.PathLike[str]) -> str | None:
    """The URL a staging folder (or a folder inside one) stands for, or None for an ordinary folder."""
    path = Path(local).absolute()
    try:
        rel = path.relative_to(curate_cache("remote").absolute())
    except ValueError:
        return None
    if not rel.parts:
        return None
    try:
        url = (path.parents[len(rel.parts) - 2] if len(rel.parts) > 1 else path) / URL_FILE
        text = url.read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        return None
    inner = "/".join(rel.parts[1:])
    return (f"{text}/{inner}" if inner else text) or None
