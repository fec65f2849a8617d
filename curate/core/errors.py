"""User-facing errors: one line, no traceback, non-zero exit; and which failures are whose.

:class:`UserError` is a mistake the user can fix. :func:`reading_input` turns a failure to read an input
file (a damaged Parquet footer or column chunk, an Arrow error) into a :class:`InputError` naming that
file, so the command line never blames ``--out`` for it; :func:`from_storage` finds a failure of object
storage in an exception's chain (those keep their own line: the server, not the file, failed).

A message names a setting as the user gave it: by its flag (``--near-threshold``) on the command
line, by its config field (``near_threshold``) when called from Python. Messages are written with
flags; raised outside a command (:func:`command_line` not active), the flags of config settings become
their field names, from the one table :func:`curate.core.settings.flag_fields`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

#: Set while a command runs: its worker threads and the worker processes it starts (which inherit it) name flags.
NAMES_ENV = "CURATE_ERROR_NAMES"
_FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")


@contextmanager
def command_line() -> Iterator[None]:
    """While active (the CLI runs a verb), errors name settings by their flags."""
    saved = os.environ.get(NAMES_ENV)
    os.environ[NAMES_ENV] = "flags"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(NAMES_ENV, None)
        else:
            os.environ[NAMES_ENV] = saved


def python_names(message: str) -> str:
    """``message`` with every flag of a config setting replaced by the field's name (``--top-k`` → ``top_k``);
    a command it suggests (``curate vocab embed --vocab FILE``, up to the next ``;``) keeps its flags."""
    from curate.core.settings import flag_fields

    table = flag_fields()
    parts = re.split(r"(;)", message)
    for i, part in enumerate(parts):
        head, command, tail = part.partition("curate ")
        parts[i] = _FLAG.sub(lambda m: table.get(m.group(0), m.group(0)), head) + command + tail
    return "".join(parts)


#: Libraries through which object storage is reached: their exceptions are the storage's, not curate's.
STORAGE_MODULES = ("botocore", "aiobotocore", "s3fs", "gcsfs", "aiohttp", "google.auth", "google.api_core",
                   "google.cloud", "urllib3", "requests", "fsspec")


class UserError(Exception):
    """A mistake the user can fix (bad flag, missing file, malformed input).

    The CLI prints ``error: <message>`` on one line and exits with code 2.
    The message should name the file, the line or record id, and what to do; it names settings by their
    flags, which Python callers read as the config's field names.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        text = message.replace("\n", " ").strip()
        if "--" in text and os.environ.get(NAMES_ENV) != "flags":
            text = python_names(text)
        super().__init__(text)


class InputError(UserError):
    """An input file that cannot be read (damaged, or not what its name says): the message names it."""


def from_storage(exc: BaseException) -> BaseException | None:
    """The exception of :data:`STORAGE_MODULES` in the chain of ``exc`` (``__cause__``/``__context__``), or None."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if type(cause).__module__.startswith(STORAGE_MODULES):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


@contextmanager
def reading_input(path: str | os.PathLike[str]) -> Iterator[None]:
    """Raise failures to read the input file ``path`` inside the block as an :class:`InputError` naming it.

    Converted: an ``OSError`` that names no other file (pyarrow's ``Invalid column metadata (corrupt
    file?)``, a thrift footer that does not parse) and pyarrow's own errors. Left alone: errors naming
    another file (the command line names that one), failures of object storage (:func:`from_storage`)
    and everything else (a bug is a traceback).
    """
    try:
        yield
    except OSError as exc:
        named = exc.filename2 or exc.filename
        if (named is not None and os.fspath(named) != os.fspath(path)) or from_storage(exc) is not None:
            raise
        raise InputError(_unreadable(path, exc)) from exc
    except Exception as exc:
        if not type(exc).__module__.startswith("pyarrow") or from_storage(exc) is not None:
            raise
        raise InputError(_unreadable(path, exc)) from exc


def _unreadable(path: str | os.PathLike[str], exc: BaseException) -> str:
    text = " ".join((getattr(exc, "strerror", None) or str(exc)).split())[:200] or type(exc).__name__
    return (f"{os.fspath(path)}: this input file cannot be read ({text}): it is damaged or not what its name says; "
            "repair or replace it, or leave it out of the inputs")
