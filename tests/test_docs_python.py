"""Every ```python block of docs/python.md runs, in order, in one namespace, in a folder holding the files the
page names (a few sample records and RL prompts, a small vocabulary, the tiny models as ``models/``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from curate.core.threads import environ

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python.md"
BLOCKS = [(m.group(1), PAGE.read_text(encoding="utf-8")[:m.start()].count("\n") + 2)
          for m in re.finditer(r"^```python\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.S | re.M)]
VOCAB = ["cat", "dog", "rocket", "astronaut", "coffee", "flower", "chart", "coin", "clock", "text", "sky", "city"]


@dataclass
class DocsRun:
    """The folder the blocks run in, their shared namespace and how many have run."""

    folder: Path
    namespace: dict[str, Any] = field(default_factory=dict)
    done: int = 0


def _subset(src: Path, dst: Path, n: int) -> None:
    """The first ``n`` records of ``src`` with their image paths made absolute."""
    with open(dst, "w", encoding="utf-8") as fh:
        for line in src.read_text(encoding="utf-8").splitlines()[:n]:
            rec = json.loads(line)
            rec["images"] = [str((src.parent / p).resolve()) for p in rec.get("images") or []]
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


@pytest.fixture(scope="module")
def docs_run(tmp_path_factory: pytest.TempPathFactory, sample_data: Path, tiny_clip_spec: str, tiny_vlm_dir: Path,
             tiny_processor_dir: Path) -> DocsRun:
    folder = tmp_path_factory.mktemp("docs-python")
    _subset(sample_data / "records.jsonl", folder / "records.jsonl", 10)
    _subset(sample_data / "rl" / "prompts.jsonl", folder / "prompts.jsonl", 4)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (folder / "models").mkdir()
    (folder / "models" / "clip").symlink_to(tiny_clip_spec.removeprefix("local-dir:"))
    (folder / "models" / "vlm").symlink_to(tiny_vlm_dir)
    (folder / "models" / "processor").symlink_to(tiny_processor_dir)
    return DocsRun(folder)


def test_the_page_has_blocks() -> None:
    assert len(BLOCKS) >= 8 and all("import" in code or "print" in code for code, _ in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"line{line}" for _, line in BLOCKS])
def test_block_runs(index: int, docs_run: DocsRun, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(docs_run.folder)
    with environ({"CURATE_CACHE": str(docs_run.folder / "cache")}):
        while docs_run.done <= index:  # the blocks before it first (they define what it uses)
            code, line = BLOCKS[docs_run.done]
            docs_run.done += 1
            exec(compile(code, f"{PAGE}:{line}", "exec"), docs_run.namespace)  # noqa: S102 - the page's own code
    printed = capsys.readouterr().out
    if "print(" in BLOCKS[index][0]:
        assert printed.strip(), f"docs/python.md:{BLOCKS[index][1]}: printed nothing"
