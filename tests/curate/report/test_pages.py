"""Sample pages of single stages: images carried as bytes are shown, not named unreadable."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from curate.recaption.config import RecaptionConfig
from curate.recaption.stage import recaption
from curate.report import write_report

STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def test_recaption_page_shows_images_that_arrived_as_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    blobs = []
    for _ in range(3):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)).save(buf, "PNG")
        blobs.append(buf.getvalue())
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "caption": ["x", "y", "z"],
                             "image": pa.array([{"bytes": b, "path": None} for b in blobs], STRUCT)}), src)
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": f"{i}#en", "response": "A square of coloured noise on a grid."})
                               + "\n" for i in "abc"))
    stats = recaption([str(src)], RecaptionConfig(out=tmp_path / "out", backend={"rollouts": str(answers)}, langs="en"))
    assert stats["outputs"]["records"] == "records.parquet"  # the records carry their image bytes
    assert pq.read_table(tmp_path / "out" / "captions.parquet").column("image").to_pylist()[0].startswith("sha256:")
    page = write_report(tmp_path / "out").read_text(encoding="utf-8")
    assert "(image not readable)" not in page
    thumbs = list((tmp_path / "out" / "report" / "assets").glob("t-*.jpg"))
    assert len(thumbs) == 3 and all(Image.open(t).size[0] > 0 for t in thumbs)
