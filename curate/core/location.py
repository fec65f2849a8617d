"""Locations: where data is read or written, a local path or an object-store URL, as one value.

A config holds every path-valued setting as a :class:`Location` (``PackConfig.out``,
``TagConfig``'s inputs, ``--image-root``...): it knows whether it is local or remote and is
resolved where the data is read or written, never before:

* an output folder through :func:`curate.core.remote.writing` (the folder itself, or a staging
  folder on this machine whose shards stream to the bucket as they finish);
* an input file through :func:`curate.core.remote.local_file` (the file itself, or a copy kept
  in the cache), an input folder through :func:`curate.core.remote.reading`;
* records (JSONL, Parquet, tars, images) are read where they are, local or remote, by the readers.

A remote location has no local path: ``os.fspath`` of one raises ``TypeError``, so code that
forgets to resolve it fails at once instead of writing into a folder named ``s3:``.
:func:`locations` converts a config's fields on construction and refuses a URL, in one line
naming the flag, for settings that must stay on this machine (a cache folder).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.core.io import RemotePath, is_url

__all__ = ["Location", "as_location", "locations", "shown"]


class Location:
    """A local path or an object-store URL (``s3://bucket/prefix``, ``gs://...``), as the user gave it.

    Args:
        value: a path, a URL (``file://`` URLs are local paths), a :class:`~curate.core.io.RemotePath`
            or another location.
    """

    __slots__ = ("text",)

    def __init__(self, value: str | os.PathLike[str] | RemotePath | Location) -> None:
        if isinstance(value, Location):
            text = value.text
        elif isinstance(value, RemotePath):
            text = value.url
        else:
            text = os.fspath(value)
        if text.startswith("file://"):
            text = text[len("file://"):]
        self.text = text.rstrip("/") if is_url(text) else text

    @property
    def is_remote(self) -> bool:
        """Whether the data lives in object storage."""
        return is_url(self.text)

    @property
    def url(self) -> str:
        """The URL of a remote location (no trailing slash).

        Raises:
            ValueError: the location is local.
        """
        if not self.is_remote:
            raise ValueError(f"{self.text} is a local path, not a URL")
        return self.text

    @property
    def path(self) -> Path:
        """The path of a local location.

        Raises:
            ValueError: the location is remote (resolve it with :mod:`curate.core.remote`).
        """
        if self.is_remote:
            raise ValueError(f"{self.text} is in object storage: resolve it where it is read or written")
        return Path(self.text)

    def __fspath__(self) -> str:
        if self.is_remote:
            raise TypeError(f"{self.text} is in object storage and has no local path: resolve it where it is read "
                            "or written (curate.core.remote)")
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Location({self.text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Location, str, os.PathLike, RemotePath)):
            return Location(other).text == self.text
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return Location, (self.text,)

    def __truediv__(self, name: str) -> Location:
        return Location(f"{self.text}/{name}" if self.is_remote else os.path.join(self.text, name))

    @property
    def name(self) -> str:
        """The last component."""
        return self.text.rsplit("/", 1)[-1] if self.is_remote else Path(self.text).name

    @property
    def parent(self) -> Location:
        """The containing folder (prefix)."""
        return Location(self.text.rsplit("/", 1)[0] if self.is_remote else str(Path(self.text).parent))


def as_location(value: str | os.PathLike[str] | RemotePath | Location | None) -> Location | None:
    """``value`` as a :class:`Location` (None stays None)."""
    return None if value is None else Location(value)


def shown(value: str | os.PathLike[str] | Location) -> str:
    """How a location is named to users: the URL for a remote one, the path as given otherwise.

    A staging folder of :mod:`curate.core.remote` is named by the URL it stands for.
    """
    if isinstance(value, Location):
        return value.text
    from curate.core.staging import url_of

    text = os.fspath(value)
    return url_of(text) or text


def _convert(value: Any) -> Any:
    if value is None or isinstance(value, Location):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(Location(v) for v in value)
    if isinstance(value, Mapping):
        return {k: Location(v) for k, v in value.items()}
    return Location(value)


def _each(value: Any) -> Iterable[Location]:
    if value is None:
        return ()
    if isinstance(value, tuple):
        return value
    if isinstance(value, dict):
        return value.values()
    return (value,)


def locations(config: Any, remote: Mapping[str, str] = {}, local: Mapping[str, str] = {}) -> None:  # noqa: B006
    """Turn the path-valued fields of a (frozen) config dataclass into :class:`Location` values, in place.

    Args:
        config: the dataclass instance (called from its ``__post_init__``).
        remote: field name → flag, for settings that may be local or in a bucket.
        local: field name → flag, for settings that must be on this machine's disk (a cache).

    Raises:
        UserError: a URL given for a local-only setting, naming its flag.
    """
    names = {f.name for f in fields(config)}
    for name, flag in {**remote, **local}.items():
        assert name in names, f"{type(config).__name__} has no field {name}"
        value = _convert(getattr(config, name))
        object.__setattr__(config, name, value)
        if name in local:
            for loc in _each(value):
                if loc.is_remote:
                    raise UserError(f"{flag} {loc}: must be a folder on this machine's disk, not in object "
                                    "storage; give a local path")
