"""Checks that the step configurations run on construction, before any expensive work.

Every check raises :class:`curate.core.errors.UserError` with one line that names
the flag, the value and what to do. They are pure (apart from looking at the file
system for paths) and cheap, so a config can run all of them in ``__post_init__``:
a mistake is reported before a model loads or an image is decoded.

:func:`configure` builds a config from keyword settings for Python callers that
do not build one themselves.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import operator
import os
from collections.abc import Iterable
from pathlib import Path
from collections.abc import Iterator
from typing import Any, TypeVar

from curate.core.errors import UserError
from curate.core.io import is_url, text_of

C = TypeVar("C")


#: Paths that earlier steps of a recipe will make: a recipe's settings are checked before its first step runs, when
#: they do not exist yet (:func:`made_later`).
_LATER: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("curate_made_later", default=())


@contextlib.contextmanager
def made_later(paths: Iterable[str | os.PathLike[str]]) -> Iterator[None]:
    """Within the block, the input checks accept ``paths`` (and what lies inside them) as if they existed."""
    token = _LATER.set(tuple(os.path.abspath(text_of(p)) for p in paths if not is_url(p)))  # URLs: checked when read
    try:
        yield
    finally:
        _LATER.reset(token)


def later(path: str | os.PathLike[str] | None) -> bool:
    """Whether ``path`` is one an earlier step will make (see :func:`made_later`)."""
    pending = _LATER.get()
    if not pending or path is None or is_url(path):
        return False
    full = os.path.abspath(text_of(path))
    return any(full == p or full.startswith(p.rstrip(os.sep) + os.sep) for p in pending)


def configure(cls: type[C], config: C | None, **settings: Any) -> C:
    """``config`` with ``settings`` applied (None settings are ignored), or a new ``cls(**settings)``.

    Raises:
        UserError: a setting that ``cls`` does not have, or one that fails its checks.
    """
    given = {k: v for k, v in settings.items() if v is not None}
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(given) - names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no setting(s) {', '.join(unknown)}")
    if config is None:
        return cls(**given)
    return dataclasses.replace(config, **given) if given else config  # type: ignore[type-var]


def at_least(flag: str, value: int | float | None, minimum: int | float) -> None:
    """``value`` is None or a finite number >= ``minimum``."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value) or not value >= minimum:
        raise UserError(f"{flag} must be at least {minimum}, got {value}")


def at_most(flag: str, value: int | float | None, maximum: int | float, what: str = "") -> None:
    """``value`` is None or at most ``maximum``: a flag whose cost grows with its value is bounded before any work
    (``what``: why the bound, for the message)."""
    if value is not None and value > maximum:
        raise UserError(f"{flag} {value:,}: at most {maximum:,}{f' ({what})' if what else ''}")


def integer(flag: str, value: Any, minimum: int | None = None) -> Any:
    """``value`` is None or an integer (numpy integers too; never a bool or a float) >= ``minimum``.

    Returns:
        ``value`` as a Python int (None stays None).
    """
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)  # ints and numpy integers; floats and strings have no __index__
    except TypeError:
        raise UserError(f"{flag} must be an integer, got {value!r}") from None
    if minimum is not None and value < minimum:
        raise UserError(f"{flag} must be >= {minimum}, got {value}")
    return value


def above(flag: str, value: float | None, minimum: float) -> None:
    """``value`` is None or a finite number > ``minimum``."""
    if value is None:
        return
    if not math.isfinite(value) or not value > minimum:
        what = "a positive number" if minimum == 0 else f"a number above {minimum}"
        raise UserError(f"{flag} must be {what}, got {value}")


def within(flag: str, value: float | None, lo: float, hi: float) -> None:
    """``value`` is None or a number in ``[lo, hi]`` (NaN is refused)."""
    if value is None:
        return
    if not lo <= value <= hi:
        raise UserError(f"{flag} must be within [{lo}, {hi}], got {value}")


def finite(flag: str, value: float | None) -> None:
    """``value`` is None or a finite number."""
    if value is not None and not math.isfinite(value):
        raise UserError(f"{flag} must be a finite number, got {value}")


def one_of(flag: str, value: Any, choices: Iterable[Any]) -> None:
    """``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise UserError(f"{flag} {value}: use {spoken(choices)}")


def spoken(choices: Iterable[Any]) -> str:
    """``("a", "b", "c")`` → ``"a, b or c"``."""
    names = [str(c) for c in choices]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _elsewhere(path: str | os.PathLike[str]) -> bool:
    """A URL (s3://, gs://...) or a brace pattern: checked when it is listed, before any work starts."""
    text = text_of(path)
    return "://" in text[:32] or ("{" in text and "}" in text)


def _first_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _writable_below(flag: str, path: Path) -> None:
    """The nearest existing ancestor of ``path`` is a folder we may write into."""
    base = _first_existing(path.parent if path.exists() else path)
    if not base.is_dir():
        raise UserError(f"{flag} {path}: {base} is a file, not a folder; choose another path")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: permission denied in {base}; choose a folder you can write to")


def _local(path: str | os.PathLike[str] | None) -> Path | None:
    """``path`` to check here, or None when it is not given or is checked when listed (a URL, a pattern)."""
    return None if path is None or _elsewhere(path) else Path(path)


def out_dir(flag: str, path: str | os.PathLike[str] | None) -> None:
    """An output folder: absent (it will be made) or a writable folder, never a file."""
    if (p := _local(path)) is None:
        return
    if str(path) == "":
        raise UserError(f"{flag}: give a folder path")
    if p.exists() and not p.is_dir():
        raise UserError(f"{flag} {p}: exists and is not a folder; give a folder path (or remove the file)")
    _writable_below(flag, p)


def out_file(flag: str, path: str | os.PathLike[str] | None) -> None:
    """An output file: absent or a file, never a folder; its folder can be made."""
    if (p := _local(path)) is None:
        return
    if str(path) == "" or p.is_dir() or os.fspath(path).endswith(("/", os.sep)):
        raise UserError(f"{flag} {os.fspath(path)}: is a folder; give a file path (for example {p / 'concepts.npy'})")
    _writable_below(flag, p)


def in_file(flag: str, path: str | os.PathLike[str] | None) -> None:
    """An input file that exists (``None``: not given)."""
    if (p := _local(path)) is None or later(p):
        return
    if p.is_dir():
        raise UserError(f"{flag} {p}: is a folder; give a file")
    if not p.is_file():
        raise UserError(f"{flag} {p}: no such file")


def in_path(flag: str, path: str | os.PathLike[str] | None) -> None:
    """An input file or folder that exists (``None``: not given)."""
    if path is not None and (_elsewhere(path) or later(path)):
        return
    if path is not None and not Path(path).exists():
        raise UserError(f"{flag} {path}: no such file or folder")


def in_dir(flag: str, path: str | os.PathLike[str] | None) -> None:
    """An input folder that exists, or a bucket prefix (``None``: not given)."""
    if path is None or _elsewhere(path) or later(path):
        return
    if not Path(path).is_dir():
        raise UserError(f"{flag} {path}: no such folder")


def cache_dir(flag: str, path: str | os.PathLike[str] | None) -> None:
    """A cache folder: absent or a folder, never a file."""
    if path is not None and is_url(path):
        return
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise UserError(f"{flag} {path}: exists and is not a folder; give a folder for the cache")
    if path is not None:
        _writable_below(flag, Path(path))
