"""What reusing earlier token counts did: reused, counted, and ignored records, in one report.

``curate pack INPUT --lengths OLD/lengths.parquet`` (or the automatic reuse of a folder
that counted the same inputs) takes from ``OLD`` only the text counts of the input's
records whose ``text_key`` matches (:mod:`packer.lengths`); every other record is
counted, and records of ``OLD`` that are not in the input are ignored and reported,
never packed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.stats import StageStats

SHOWN_IDS = 5


def reuse_report(earlier: Path, table: pa.Table, stats: StageStats, *, explicit: bool) -> dict[str, Any]:
    """Compare the earlier counts with this run's; print one line on stderr and return the figures.

    Args:
        earlier: The earlier ``lengths.parquet``.
        table: This run's merged lengths (records counted).
        stats: This run's lengths-step stats (``text_counts_reused`` in ``extra``; rejects).
        explicit: Whether the user named ``earlier`` (``--lengths``) or it was found automatically.
    """
    old_ids = set(pq.read_table(earlier, columns=["id"]).column("id").to_pylist())
    here = set(table.column("id").to_pylist()) | {r[0] for r in stats.rejects}
    ignored = sorted(old_ids - here)
    reused = int(stats.extra.get("text_counts_reused", 0))
    report = {"from": str(earlier), "records_in_lengths": len(old_ids), "text_counts_reused": reused,
              "counted": table.num_rows - reused, "ignored": len(ignored), "ignored_ids": ignored[:SHOWN_IDS]}
    where = f"--lengths {earlier}" if explicit else f"token counts of an earlier run ({earlier})"
    more = f" (e.g. {', '.join(ignored[:SHOWN_IDS])})" if ignored else ""
    print(f"{where}: reused the text counts of {reused:,} records, counted {report['counted']:,} new or changed "
          f"records (image headers are always read again), ignored {len(ignored):,} of its records that are not "
          f"in the input{more}", file=sys.stderr)
    return report
