"""Report pages as a reader sees them in headless Chromium (issue 49, item 7; issue 46, item 6).

Stage folders are written here (or by a real ``curate score``), the report made with ``write_report``, and each
page read back from Chromium's DOM after its script ran: the pack page's padding figure says what it compares and
its log histogram shows bins of count 1; ids with bidi overrides and NULs display as escapes; the verify page has
no empty ``seed``; the dedup page shows its per-source counts once; the score page shows a reward histogram and
each response's text; the versions line names Ray only when Ray ran shards.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from curate.cli import cli
from curate.core.stats import StageStats, engine_used, finish_stage, run_header
from curate.report import write_report
from packer.pack import plot_packing
from tests.curate.report.test_report_browser import CHROMIUM, chromium

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install -y chromium")

EVIL = "evil\u202egpj.exe"  # displays as "evilexe.jpg" when the override acts
NUL = "nul\x00id"


def dom_of(page: Path, profile: Path) -> str:
    """The DOM of ``page`` after its script ran, checked: no console message, script done, images decoded."""
    dom, console = chromium(profile, page.as_uri(), "--dump-dom")
    assert not console, console
    assert 'data-ready="1"' in dom and 'data-loaded="no"' not in dom
    return dom


def text_of(dom: str) -> str:
    """The DOM's text, tags removed (entities kept)."""
    return re.sub(r"<[^>]+>", " ", dom)


def _blue_heights(png: Path) -> list[int]:
    """Heights in pixels of the bars of the sample-length panel (the left third of packing.png), left to right."""
    rgb = np.asarray(Image.open(png).convert("RGB"), dtype=np.int16)
    left = rgb[:, : rgb.shape[1] // 2]
    blue = (np.abs(left - np.array([0x4C, 0x72, 0xB0])).sum(axis=2) < 30)
    columns = blue.sum(axis=0)
    heights, run = [], []
    for value in [*columns.tolist(), 0]:
        if value:
            run.append(value)
        elif run:
            heights.append(max(run))
            run = []
    return heights


def test_pack_page_padding_histogram_and_spoofing_ids(tmp_path: Path) -> None:
    out = tmp_path / "pack"
    out.mkdir()
    ids = ["a", "b", EVIL, NUL, "c", "d", "e"]
    tokens = [300, 300, 300, 300, 500, 700, 900]  # one length 4 times, three lengths once
    pq.write_table(pa.table({"bin": [0] * 4 + [1] * 3, "id": ids, "tokens": tokens}), out / "plan.parquet")
    plot_packing(out / "packing.png", np.array(tokens), np.array([1200, 2100]), 2200)
    stats = StageStats()
    stats.seen("web", 9)
    stats.kept("web", 7)
    stats.error(EVIL + "2", "web", "unreadable_image", "x")
    stats.error(NUL + "2", "web", "unreadable_image", "y")
    result = {**run_header("pack", seed=0, settings={"ctx": 2200}), "records_in": 9, "records_packed": 7,
              "dropped": {}, "errored": dict(stats.errored), "bins": 2, "fill_ratio": 0.75,
              "padding_reduction": 0.0, "padding_tokens_packed": 1100}
    finish_stage(out, result, stats)
    write_report(out)
    dom = dom_of(out / "report" / "stage.html", tmp_path / "p")
    padding = re.search(r'<p class="muted" id="padding">(.*?)</p>', dom).group(1)
    assert "random batches of 8" in padding and "1,100 tokens" in padding and "too few" in padding, padding
    assert "0.0×" not in dom and "padding reduction" not in dom
    # ids that would reorder or hide what is shown are escapes: here in the strips and in the rejects table
    assert "\u202e" not in dom and "\x00" not in dom
    assert dom.count("evil\\u202egpj.exe") >= 2 and dom.count("nul\\x00id") >= 2
    # the log histogram: each count-1 bar is at least a quarter as high as the count-4 bar (not a sliver at 10⁰)
    assert re.search(r'<img class="plot" src="assets/stage-packing.png"[^>]*data-loaded="\d+x\d+"', dom)
    heights = _blue_heights(out / "report" / "assets" / "stage-packing.png")
    assert len(heights) == 4 and min(heights[1:]) >= heights[0] / 4, heights


def test_verify_page_without_seed_and_versions_without_unused_ray(tmp_path: Path) -> None:
    out = tmp_path / "v"
    out.mkdir()
    header = run_header("verify")
    assert "ray" not in header["versions"]  # installed here, but nothing ran on it
    (out / "stats.json").write_text(json.dumps({**header, "checked": ["packed"], "ok": True}))
    write_report(out)
    dom = dom_of(out / "report" / "stage.html", tmp_path / "p")
    assert not re.search(r"seed\s*;", text_of(dom)) and "✓ consistent" in dom
    versions = re.findall(r"<p class=\"muted\">([^<]*python [^<]*)</p>", dom)
    assert versions and "ray" not in versions[0] and "pyarrow" in versions[0], versions
    engine_used("ray")
    assert "ray" in run_header("pack")["versions"]
    finish_stage(tmp_path / "ran", run_header("pack"))  # the stage that used it ends: the next one starts clean
    assert "ray" not in run_header("pack")["versions"]


def test_dedup_page_shows_its_per_source_counts_once(tmp_path: Path) -> None:
    out = tmp_path / "d"
    out.mkdir()
    rejects = pa.table({"id": ["w2", "b2"], "source": ["web", "books"], "kind": ["dropped"] * 2,
                        "reason": ["exact_duplicate", "near_duplicate"], "detail": ["", ""],
                        "duplicate_of": ["w1", "b1"], "distance": [None, 3.0]})
    pq.write_table(rejects, out / "rejects.parquet")
    per_source = {s: {"records_in": 2, "records_out": 1, "dropped": {r: 1}, "errored": {}}
                  for s, r in (("web", "exact_duplicate"), ("books", "near_duplicate"))}
    (out / "stats.json").write_text(json.dumps({
        **run_header("dedup", seed=0), "records_in": 4, "records_out": 2, "dropped": {"exact_duplicate": 1,
        "near_duplicate": 1}, "errored": {}, "per_source": per_source, "inputs": [],
        "duplicates": {"exact_same_bytes": 1, "exact_same_pixels": 0, "near": 1, "semantic": 0, "kept_with_copies": 2}}))
    write_report(out)
    dom = dom_of(out / "report" / "stage.html", tmp_path / "p")
    per_source_tables = len(re.findall(r'<th>source</th><th class="n">in</th><th class="n">kept</th>', dom))
    assert per_source_tables == 1  # the funnel's; not a second one on the stage's own section
    assert "exact copies: 1 with the same bytes" in dom and "2 removed" not in dom


def test_score_page_shows_rewards_and_responses(sample_data: Path, tmp_path: Path) -> None:
    prompts = [json.loads(line) for line in (sample_data / "rl" / "prompts.jsonl").read_text().splitlines()][:8]
    records = tmp_path / "prompts.jsonl"
    records.write_text("".join(json.dumps({**p, "images": [str(sample_data / "rl" / i) for i in p.get("images", [])]}) + "\n"
                               for p in prompts))
    responses = tmp_path / "responses.jsonl"
    answers = [(p["id"], s, f"<answer>{p['answer']}</answer>" if s == 0 else f"I think it is {s} (sample {s})")
               for p in prompts for s in range(2)]
    responses.write_text("".join(json.dumps({"id": i, "response": r}) + "\n" for i, _, r in answers))
    out = tmp_path / "scored"
    cli.main(args=["score", "--records", str(records), "--responses", str(responses), "--out", str(out)],
             prog_name="curate", standalone_mode=False)
    write_report(out)
    stats = json.loads((out / "stats.json").read_text())
    dom = dom_of(out / "report" / "stage.html", tmp_path / "p")
    bins = [int(n) for n in re.findall(r'<g data-bin="\d+" data-count="(\d+)">', dom)]
    # the histogram counts the scored responses only (an errored row's reward 0 is no reward)
    assert len(bins) == 10 and sum(bins) == stats["scored"] >= 8 and bins[-1] >= 1 and bins[0] >= 1, (bins, stats)
    cards = re.findall(r'<div class="card wide" data-row="1".*?</div></div></div>', dom, flags=re.S)
    assert len(cards) == 16
    for card in cards:  # every score beside the response it scores and the gold it was scored against
        assert "(text not found)" not in card, card
        assert re.search(r"reward <b>[\d.]+</b> · accuracy [\d.]+ · format [\d.]+", card) or "not scored" in card
    assert sum("not scored" in c for c in cards) == sum(stats["errored"].values())
    assert "&lt;answer&gt;7&lt;/answer&gt;" in dom and "I think it is 1 (sample 1)" in dom
    assert re.search(r'id="per-verifier"', dom)
