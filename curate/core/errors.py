"""User-facing errors: one line, no traceback, non-zero exit."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (bad flag, missing file, malformed input).

    The CLI prints ``error: <message>`` on one line and exits with code 2.
    The message should name the file, the line or record id, and what to do.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\n", " ").strip())
