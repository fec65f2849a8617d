"""A multi-megabyte row never costs memory in proportion to its size (issue 11, item 3).

One process counts tokens (``pack``) and generates (``rl-filter``, transformers backend)
for small rows first, then for the same rows plus one 12 MB prompt: the peak resident
size may grow by a few copies of the row as read (JSON parsing), never by what
tokenizing 2.4 million words or running the model on them would take.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow
SCRIPT = textwrap.dedent("""
    import json, resource, sys
    from pathlib import Path
    from packer.pack import pack
    from curate.rl.config import RlFilterConfig
    from curate.rl.filter import rl_filter

    d, processor, vlm = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    backend = {"model": vlm, "device": "cpu", "dtype": "float32"}
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    def run(tag):
        p = pack([d / f"{tag}.jsonl"], out=d / f"pack-{tag}", processor=processor, ctx=4096, plan_only=True, plot=False)
        r = rl_filter([str(d / f"{tag}.jsonl")], RlFilterConfig(out=d / f"rl-{tag}", backend=backend, n=1,
                                                                max_new_tokens=4, plot=False))
        return {"pack": p["dropped"], "rl": r["dropped"], "peak": peak()}
    small = run("small")
    big = run("big")
    print(json.dumps({"small": small, "big": big}))
""")


def test_a_12_mb_prompt_is_refused_before_tokenizing(tiny_processor_dir: Path, tiny_vlm_dir: Path,
                                                     tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "source": "s", "problem": f"What is {i} + 1?", "answer": str(i + 1),
             "answer_type": "number"} for i in range(3)]
    huge = {"id": "huge", "source": "s", "problem": "What is 1 + 1? " + "blah " * 2_400_000, "answer": "2",
            "answer_type": "number"}
    (tmp_path / "small.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "big.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [rows[0], huge, *rows[1:]]))
    row_bytes = len(json.dumps(huge))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(tiny_processor_dir), str(tiny_vlm_dir)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                               "CURATE_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["small"]["pack"] == {} and got["small"]["rl"].get("too_long") is None
    assert got["big"]["pack"] == {"too_long": 1} and got["big"]["rl"].get("too_long") == 1
    grown = got["big"]["peak"] - got["small"]["peak"]
    assert grown < 12 * row_bytes, f"peak RSS grew by {grown / 2**20:.0f} MiB for a {row_bytes / 2**20:.0f} MiB row"
