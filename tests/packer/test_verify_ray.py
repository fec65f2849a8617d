"""``curate verify --executor ray``: on a real local Ray cluster, the report of local worker processes.

The tars are the shards of the Ray run (several tars per task, as locally); each problem
is named with its tar whichever process found it, and the seeded recount sample is the same.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from curate.executors import get_executor
from packer.pack import pack
from packer.verify import VerifyReport, verify_pack

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def packed(tiny_processor_dir: Path, sample_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pack of the sample records in tars of 2 sequences (read-only: copy it to change it)."""
    out = tmp_path_factory.mktemp("pack") / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CURATE_CACHE", str(out.parent / "cache"))
        pack([sample_data / "records.jsonl", sample_data / "llava.jsonl"], out=out, ctx=2048,
             processor=str(tiny_processor_dir), seed=3, shard_size=25, sequences_per_shard=2, plot=False)
    return out


def figures(report: VerifyReport) -> tuple[int, ...]:
    return report.shards, report.sequences, report.records, report.images, report.recounted


def test_verify_on_ray_gives_the_local_report(ray_cluster: str, packed: Path, tmp_path: Path) -> None:
    clean = verify_pack(packed, sample=6, executor=get_executor("ray", concurrency=2))
    assert clean.ok, clean.problems[:3]
    assert figures(clean) == figures(verify_pack(packed, sample=6, workers=1))
    assert clean.shards >= 4 and clean.recounted == 6 and clean.images > 0
    broken = tmp_path / "broken"
    shutil.copytree(packed, broken)
    tars = sorted((broken / "shards").glob("*.tar"))
    tars[-1].write_bytes(tars[-1].read_bytes()[:tars[-1].stat().st_size // 2])  # cut short
    shutil.copy(tars[0], broken / "shards" / "zzzzzz.tar")  # the same sequences twice
    on_ray = verify_pack(broken, sample=6, executor=get_executor("ray", concurrency=2))
    local = verify_pack(broken, sample=6, workers=2)
    assert on_ray.problems == local.problems and figures(on_ray) == figures(local)
    text = " | ".join(on_ray.problems)
    assert f"{tars[-1].name}: unreadable after " in text and "appear more than once" in text, text
    assert not (broken / ".verify").exists()


def test_verify_cli_on_ray(ray_cluster: str, packed: Path, tmp_path: Path) -> None:
    """``curate verify OUT --executor ray --ray-address A`` prints the local run's figures, names a cut tar and
    exits 1."""
    broken = tmp_path / "broken"
    shutil.copytree(packed, broken)
    tar = sorted((broken / "shards").glob("*.tar"))[1]
    tar.write_bytes(tar.read_bytes()[:tar.stat().st_size // 2])
    local = verify_pack(broken, sample=4, workers=1)
    done = subprocess.run([sys.executable, "-m", "curate", "verify", str(broken), "--sample", "4", "--executor", "ray",
                           "--ray-address", ray_cluster, "--workers", "1"],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, timeout=300)
    said = done.stdout + done.stderr  # the console writes to stderr
    assert done.returncode == 1 and f"{tar.name}: unreadable after " in said, said
    assert (f"checked {local.shards} shards, {local.sequences:,} sequences, {local.records:,} records, "
            f"{local.images:,} images; recounted {local.recounted} records") in said, said
    assert local.recounted == 4
