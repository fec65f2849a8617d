"""The report written after every stage verb (``CURATE_REPORT=0`` turns it off); see :mod:`curate.report`.

Kept apart from :mod:`curate.cli.report` (the ``curate report`` verb) so that the
click group can call it without importing the verbs.
"""

from __future__ import annotations

import os

from curate.stages import STAGES


def report_after(verb: str, params: dict) -> None:
    """Write the report of a verb's --out once the verb finished (a failure only warns)."""
    out = params.get("out")
    spec = STAGES.get(verb)
    if spec is None or not spec.report or not out or os.environ.get("CURATE_REPORT", "1") in ("0", "false", "no"):
        return
    from curate.core.io import path_exists

    if not path_exists(f"{str(out).rstrip('/')}/stats.json"):  # a local folder, or a prefix in a bucket
        return
    write_report_or_warn(out)


def write_report_or_warn(out: object) -> None:
    """Write OUT/report/ and print where it is; a failure only warns (the outputs are complete without it)."""
    from rich.markup import escape

    from curate.core.progress import console
    from curate.report import write_report

    try:
        index = write_report(out)
    except Exception as exc:  # noqa: BLE001 - the stage's outputs are complete; the report is a view of them
        console.print(f"[yellow]warning:[/yellow] {escape(f'report not written ({type(exc).__name__}: {exc}); try: curate report {out}')}")
        return
    console.print(f"report: {index}", markup=False, highlight=False)
