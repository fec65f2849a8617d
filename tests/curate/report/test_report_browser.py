"""The report in a real headless Chromium: no JavaScript errors, counts equal stats.json, thumbnails render.

Chromium comes from the Debian package ``chromium`` (``apt-get install -y chromium``; .ci/run installs it);
without it these tests skip, naming the package.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from curate.cli import cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install -y chromium "
                                                          "(Debian package `chromium`)")


def chromium(profile: Path, url: str, *args: str) -> tuple[str, list[str]]:
    """Run headless Chromium on ``url``: (stdout, console messages)."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
           "--enable-logging=stderr", "--v=0", *args, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def _fmt(n: int) -> str:
    return f"{n:,}"


def _check_page(dom: str, console: list[str]) -> None:
    assert not console, console  # no JavaScript error, no console message at all
    assert 'data-ready="1"' in dom  # the page's script ran to its end
    assert not re.search(r'(src|href)="(https?:)?//', dom)  # nothing from the network
    assert 'data-loaded="no"' not in dom  # every image decoded


def _counts_shown(dom: str) -> dict[str, str]:
    return dict(re.findall(r'data-count="(\w+)">([\d,–]+)<', dom))


def test_run_report_in_chromium(recipe_run, tmp_path: Path) -> None:
    report = recipe_run.out / "report"
    index_dom, console = chromium(tmp_path / "p", (report / "index.html").as_uri(), "--dump-dom")
    _check_page(index_dom, console)
    thumbs_seen = 0
    for name in ("01-balance", "02-recaption", "03-pack", "04-verify"):
        assert f'href="{name}.html"' in index_dom
        stats = json.loads((recipe_run.out / name / "stats.json").read_text())
        dom, console = chromium(tmp_path / "p", (report / f"{name}.html").as_uri(), "--dump-dom")
        _check_page(dom, console)
        shown = _counts_shown(dom)
        if name == "04-verify":
            continue
        dropped, errored = sum(stats["dropped"].values()), sum(stats["errored"].values())
        kept = {"01-balance": "records_selected", "02-recaption": "records_out", "03-pack": "records_packed"}[name]
        assert shown == {"records_in": _fmt(stats["records_in"]), "kept": _fmt(stats[kept]),
                         "dropped": _fmt(dropped), "errored": _fmt(errored)}, name
        for reason, n in stats["dropped"].items():
            assert f'data-reason-count="dropped:{reason}">{_fmt(n)}<' in dom
        loaded = re.findall(r'<img src="(assets/[^"]+)"[^>]*data-loaded="(\d+)x(\d+)"', dom)
        if name in ("01-balance", "02-recaption"):
            assert loaded, f"{name}: no thumbnail rendered"
        for src, w, h in loaded:
            assert max(int(w), int(h)) <= 256 or not src.startswith("assets/t-")
            if src.startswith("assets/t-"):
                pixels = np.asarray(Image.open(report / src).convert("L"), dtype=np.float32)
                assert pixels.std() > 2.0, f"{src} is blank"
                thumbs_seen += 1
        if name == "03-pack":
            strips = re.findall(r'<div class="strip">(.*?)</div>', dom)
            assert len(strips) == stats["bins"]
            assert all('class="seg-text"' in s for s in strips)
    assert thumbs_seen >= 3

    # filters preset from the URL hash hide the other rows
    rejects = json.loads((recipe_run.out / "02-recaption" / "stats.json").read_text())["dropped"]
    reason = sorted(rejects)[0]
    dom, console = chromium(tmp_path / "p", (report / "02-recaption.html").as_uri() + f"#reason={reason}",
                            "--dump-dom")
    _check_page(dom, console)
    table = dom[dom.index('id="rejects-table"'):]
    visible = re.findall(r'<tr data-row="1" data-reason="([^"]+)"[^>]*class="(?!hidden)', table)
    rows = re.findall(r'<tr data-row="1" data-reason="([^"]+)"[^>]*?(class="hidden")?>', table)
    assert rows and {r for r, hidden in rows if not hidden} == {reason}
    assert sum(1 for r, hidden in rows if not hidden) == min(rejects[reason], 48)
    del visible

    shot = tmp_path / "balance.png"
    chromium(tmp_path / "p", (report / "01-balance.html").as_uri(), f"--screenshot={shot}", "--window-size=1280,1600")
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float32)
    assert pixels.shape == (1600, 1280) and pixels.std() > 20  # not a blank page


def test_verb_writes_its_report(sample_data: Path, tmp_path: Path, monkeypatch) -> None:
    """rl-filter on answers from a file: the report written at the verb's end shows prompts, images and answers."""
    monkeypatch.setenv("CURATE_REPORT", "1")
    prompts = [json.loads(line) for line in (sample_data / "rl" / "prompts.jsonl").read_text().splitlines()][:12]
    src = tmp_path / "prompts.jsonl"
    src.write_text("".join(json.dumps({**p, "images": [str(sample_data / "rl" / i) for i in p.get("images", [])]})
                           + "\n" for p in prompts))
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": p["id"], "sample": s, "response":
                                           f"<answer>{p['answer'] if s < i % 3 else 'no idea'}</answer>"}) + "\n"
                               for i, p in enumerate(prompts) for s in range(2)))
    out = tmp_path / "rl"
    cli.main(args=["rl-filter", str(src), "--rollouts", str(answers), "--n", "2", "--out", str(out)],
             prog_name="curate", standalone_mode=False)
    stats = json.loads((out / "stats.json").read_text())
    dom, console = chromium(tmp_path / "p", (out / "report" / "index.html").as_uri(), "--dump-dom")
    _check_page(dom, console)
    dom, console = chromium(tmp_path / "p", (out / "report" / "stage.html").as_uri(), "--dump-dom")
    _check_page(dom, console)
    assert _counts_shown(dom)["records_in"] == _fmt(stats["records_in"]) == "12"
    assert _counts_shown(dom)["kept"] == _fmt(stats["kept"])
    cards = re.findall(r'<div class="card wide" data-row="1" data-source="[^"]*" data-decision="(\w+)"', dom)
    scored = stats["records_in"] - sum(stats["errored"].values())  # errored prompts are listed with the rejects
    assert len(cards) == scored and cards.count("kept") == stats["kept"]
    assert dom.count("<pre>&lt;answer&gt;") == 2 * scored  # every response shown
    assert len(re.findall(r'<img src="assets/t-[^"]+"[^>]*data-loaded="\d+x\d+"', dom)) >= 3
    for reason, n in stats["errored"].items():
        assert f'data-reason-count="errored:{reason}">{_fmt(n)}<' in dom
