"""User-facing errors: one line, no traceback, non-zero exit.

A message names a setting as the user gave it: by its flag (``--near-threshold``) on the command
line, by its config field (``near_threshold``) when called from Python. Messages are written with
flags; raised outside a command (:func:`command_line` not active), the flags of config settings become
their field names, from the one table :func:`curate.core.settings.flag_fields`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

#: Set while a command runs: its worker threads and the worker processes it starts (which inherit it) name flags.
NAMES_ENV = "CURATE_ERROR_NAMES"
_FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")


@contextlib.contextmanager
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
