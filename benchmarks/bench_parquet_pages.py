"""What checking Parquet page claims against the page's real bytes costs on honest files.

:func:`curate.core.formats.containers.check_pages` decompresses, as a stream, every page of a Brotli, Zstandard or gzip
column chunk that claims more than :data:`~curate.core.formats.containers.VERIFIED_CLAIM` bytes uncompressed, before
pyarrow reads the row group (and decompresses the page again). This times reading honest files through
:class:`~curate.core.formats.containers.ParquetRows` (``split`` then ``rows``, as every verb reads records) with the
check as it is and with it off (``VERIFIED_CLAIM`` raised past any page: what the readers did before), for:

* ``captions``: 200,000 varied captions, pyarrow's defaults (dictionary pages, 1 MiB data pages): no page is
  above the threshold, nothing is decompressed twice;
* ``long-texts``: 20,000 rows of an 11,400-character text (a few texts repeated): pages of about 11.7 MB that
  Brotli stores in a few hundred bytes, each decompressed twice;
* ``images``: 2,000 image structs of 60 KB of incompressible bytes, one row group: pages of about 60 MB, each
  decompressed twice; also the first 500 rows alone (one part of a file in one group: the check walks every page of
  the group whatever rows the part reads).

Each case runs ``--repeats`` times per setting, alternating; the best wall time is printed, and the extra cost.

    .venv/bin/python benchmarks/bench_parquet_pages.py [--codec brotli] [--repeats 3] [--data DIR] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from curate.core.formats import containers  # noqa: E402


def write_cases(folder: Path, codec: str) -> dict[str, Path]:
    """The three honest files (see the module docstring), written once into ``folder``."""
    rng = np.random.default_rng(0)
    words = np.array("a photo of the cat dog on in a red blue small large house street tree with near".split())
    cases = {name: folder / f"{name}-{codec}.parquet" for name in ("captions", "long-texts", "images")}
    if not cases["captions"].exists():
        captions = [" ".join(rng.choice(words, rng.integers(12, 40))) for _ in range(200_000)]
        pq.write_table(pa.table({"id": [f"c{i:06d}" for i in range(len(captions))], "caption": captions}),
                       cases["captions"], compression=codec)
    if not cases["long-texts"].exists():
        texts = [f"text {k}: a long caption repeated over and over " * 228 for k in range(3)]
        pq.write_table(pa.table({"id": [f"t{i:05d}" for i in range(20_000)],
                                 "caption": [texts[i % 3] for i in range(20_000)]}),
                       cases["long-texts"], compression=codec, use_dictionary=False)
    if not cases["images"].exists():
        images = [{"bytes": rng.bytes(60_000), "path": None} for _ in range(2_000)]
        pq.write_table(pa.table({"id": [f"i{i:05d}" for i in range(2_000)],
                                 "image": pa.array(images, pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                                 "caption": ["a photo"] * 2_000}),
                       cases["images"], compression=codec, row_group_size=1 << 30)
    return cases


def read_all(path: Path, rows: int | None) -> tuple[int, float]:
    """Read the file's rows (the first ``rows`` only: one part) as a verb does; ``(rows read, seconds)``."""
    reader = containers.ParquetRows()
    start = time.perf_counter()
    parts = reader.split(path, rows or (1 << 62))[:1 if rows else None]
    n = sum(1 for part in parts for _, _, problem in reader.rows(part, heads=False, views=False) if problem is None)
    return n, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--codec", default="brotli", choices=["brotli", "zstd", "gzip"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=None, help="write the files here once, reuse them later")
    parser.add_argument("--quick", action="store_true", help="one repeat (run_all.py)")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    folder = args.data or Path(tempfile.mkdtemp(prefix="bench-pages-"))
    folder.mkdir(parents=True, exist_ok=True)
    cases = write_cases(folder, args.codec)
    threshold = containers.VERIFIED_CLAIM
    runs = [(name, path, None) for name, path in cases.items()] + [("images, first 500 rows", cases["images"], 500)]
    print(f"{args.codec}; VERIFIED_CLAIM {threshold:,} bytes; best of {args.repeats}")
    print(f"{'file':<24}{'MB':>8}{'rows':>9}{'check off s':>13}{'check on s':>12}{'extra':>8}")
    for name, path, rows in runs:
        best = {"off": float("inf"), "on": float("inf")}
        for _ in range(args.repeats):
            for setting in ("off", "on"):
                containers.VERIFIED_CLAIM = 1 << 62 if setting == "off" else threshold
                n, seconds = read_all(path, rows)
                best[setting] = min(best[setting], seconds)
        containers.VERIFIED_CLAIM = threshold
        print(f"{name:<24}{path.stat().st_size / 1e6:>8.1f}{n:>9,}{best['off']:>13.3f}{best['on']:>12.3f}"
              f"{(best['on'] / best['off'] - 1) * 100:>7.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
