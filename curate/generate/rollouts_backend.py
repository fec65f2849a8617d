"""The ``rollouts`` backend: answers generated elsewhere (``--rollouts FILE``).

The file is JSONL or Parquet with one answer per row:

* ``id`` (required): the record id, matched against the request ``key``;
* ``response`` (required): the answer text;
* ``truncated`` (optional, default false): whether the answer hit its token limit;
* ``version`` (optional): which model or run produced the answer;
* ``sample`` (optional): the answer's index, used to order answers of one id;
* ``error`` (optional): rows with a non-empty error are skipped (so the
  ``rollouts.parquet`` that ``curate rl-filter`` writes can be read back).

A request gets the **first** ``n`` stored answers of its id (ordered by ``sample``
when present, else file order); if fewer are stored it gets all of them (the
caller sees ``len(responses) < n``); if none, the error ``no_rollouts``.

Versions: when ``version`` holds several values, ``--rollouts-version V`` picks
one; without it the **latest** is used, in natural order (numbers inside the
strings compare as numbers: ``v2 < v10``, ``step-900 < step-1200``, ISO dates in
date order), and the choice is reported by :meth:`RolloutsBackend.describe`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.core.formats.containers import check_pages
from curate.core.io import text_of
from curate.core.formats.rows import JsonRefused, parse_json
from curate.generate.base import GenerationBackend, GenerationRequest, GenerationResult, error_result

REQUIRED = ("id", "response")
OPTIONAL = ("truncated", "version", "sample", "error")


def natural_key(value: Any) -> tuple[Any, ...]:
    """Sort key that orders numbers inside strings numerically (``v2`` before ``v10``)."""
    parts = re.split(r"(\d+)", str(value))
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p != "")


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = parse_json(line)
            except JsonRefused as exc:
                what = "not valid JSON" if exc.reason == "malformed_json" else f"not usable JSON ({exc.reason})"
                raise UserError(f"{path}:{lineno}: {what} ({exc.detail}); fix or remove the line") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}:{lineno}: expected a JSON object with id and response")
            yield lineno, row


def _read_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for bad files
        raise UserError(f"{path}: not a readable Parquet file ({exc})") from None
    names = set(pf.schema_arrow.names)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}; a rollouts file needs "
                        f"id and response (optional: {', '.join(OPTIONAL)})")
    columns = [c for c in (*REQUIRED, *OPTIONAL) if c in names]
    row = 0
    with open(path, "rb") as raw:
        for group in range(pf.num_row_groups):
            check_pages(pf.metadata, group, raw, path)  # its page headers, before pyarrow allocates what they claim
            batches = pf.iter_batches(columns=columns, batch_size=65536, row_groups=[group])
            while True:
                try:
                    batch = next(batches, None)
                except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for corrupt pages
                    raise UserError(f"{path}: not a readable Parquet file (row group {group}: "
                                    f"{' '.join(str(exc).split())[:200]})") from None
                if batch is None:
                    break
                cols = batch.to_pydict()
                for i in range(batch.num_rows):
                    row += 1
                    yield row, {c: cols[c][i] for c in columns}


class RolloutsBackend(GenerationBackend):
    """Serve answers stored in a JSONL or Parquet file.

    Args:
        path: The rollouts file (``.jsonl``/``.json`` lines, or ``.parquet``).
        version: Which ``version`` to use when the file holds several (default: the latest).

    Raises:
        UserError: missing or unreadable file, missing columns, unknown version.
    """

    name = "rollouts"

    def __init__(self, path: str | os.PathLike[str], *, version: str | None = None) -> None:
        super().__init__()
        from curate.core.remote import local_file

        self.given = text_of(path)  # as named (a bucket's URL); read from a local copy
        self.path = Path(local_file(path, "--rollouts"))  # type: ignore[arg-type]
        if not self.path.is_file():
            raise UserError(f"--rollouts {path}: no such file")
        parquet = self.path.suffix.lower() in (".parquet", ".pq")
        rows = _read_parquet(self.path) if parquet else _read_jsonl(self.path)
        by_version: dict[str, dict[str, list[tuple[Any, int, str, bool]]]] = {}
        self.skipped_rows = 0
        n_rows = 0
        for line, row in rows:
            if not parquet:
                missing = [c for c in REQUIRED if c not in row]
                if missing:
                    raise UserError(f"{self.path}:{line}: missing {', '.join(missing)}; "
                                    "every line needs id and response")
            n_rows += 1
            rid, response = row.get("id"), row.get("response")
            if rid is None or not isinstance(response, str) or row.get("error"):
                self.skipped_rows += 1
                continue
            ver = row.get("version")
            ver = "" if ver is None else str(ver)
            sample = row.get("sample")
            order = sample if isinstance(sample, int) and not isinstance(sample, bool) else line
            by_version.setdefault(ver, {}).setdefault(str(rid), []).append(
                (order, line, response, bool(row.get("truncated") or False)))
        if n_rows == 0:
            raise UserError(f"--rollouts {path}: the file holds no rows")
        self.versions = sorted(by_version, key=natural_key)
        if version is not None:
            if str(version) not in by_version:
                raise UserError(f"--rollouts-version {version}: not in {path} (versions: {', '.join(self.versions)})")
            self.version: str | None = str(version)
        else:
            self.version = self.versions[-1] if self.versions else None
        chosen = by_version.get(self.version or "", {}) if self.version is not None else {}
        self._answers: dict[str, list[tuple[str, bool]]] = {
            rid: [(resp, trunc) for _, _, resp, trunc in sorted(items, key=lambda t: (t[0], t[1]))]
            for rid, items in chosen.items()
        }

    @property
    def most_answers(self) -> int:
        """The most answers stored for one id (in the chosen version)."""
        return max(map(len, self._answers.values()), default=0)

    @property
    def num_ids(self) -> int:
        """Number of ids with at least one stored answer (in the chosen version)."""
        return len(self._answers)

    def describe(self) -> dict[str, Any]:
        """Backend, file, chosen version and the versions present."""
        model = f"rollouts:{self.path.name}" + (f"@{self.version}" if self.version else "")
        return {"backend": self.name, "model": model,
                "rollouts": self.given, "version": self.version or None,
                "versions": [v for v in self.versions if v], "ids": len(self._answers),
                "skipped_rows": self.skipped_rows}

    def _stream(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, GenerationResult]]:
        for index, req in enumerate(requests):
            stored = self._answers.get(str(req.key))
            if not stored:
                yield index, error_result(req, "no_rollouts", f"no stored answer for id {req.key}")
                continue
            picked = stored[: req.n]
            yield index, GenerationResult(key=req.key, responses=[r for r, _ in picked],
                                          truncated=[t for _, t in picked], attempts=0)
