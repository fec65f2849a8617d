"""No hub, no hanging: a verb that needs a model the hub would serve fails at once with one line.

Each case runs a real ``python -m curate`` twice: with ``HF_HUB_OFFLINE=1``, and with the network as an
air-gapped machine has it (the hub's endpoint a loopback port nothing listens on, offline mode off). The line
names the model and says how to pass a local folder and HF_HUB_OFFLINE; nothing is written and no stage starts.
The local Hugging Face cache is an empty folder of the test's, so a model cached on the machine changes nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LLAVA = str(ROOT / "data" / "sample" / "llava.jsonl")
HUB_ID = "Qwen/Qwen2-VL-7B-Instruct"
MODES = ("offline", "unreachable")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(mode: str, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                        "all_proxy", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")}
    env["HF_HUB_CACHE"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if mode == "offline":
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env["HF_ENDPOINT"] = f"http://127.0.0.1:{_closed_port()}"
    return env


def _curate(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "curate", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert done.stdout == ""
    return lines[0]


@pytest.mark.parametrize("mode", MODES)
def test_pack_with_a_hub_processor(mode: str, tmp_path: Path) -> None:
    done = _curate(["pack", LLAVA, "--processor", HUB_ID, "--out", "o"], _env(mode, tmp_path / "hub"), tmp_path)
    line = _one_line(done)
    assert f"--processor {HUB_ID}: no such folder, and not in the local Hugging Face cache" in line
    assert "--processor DIR" in line and "HF_HUB_OFFLINE" in line
    assert ("HF_HUB_OFFLINE is set" in line) == (mode == "offline")
    assert not (tmp_path / "o").exists()


def test_pack_with_a_folder_that_is_not_there(tmp_path: Path) -> None:
    done = _curate(["pack", LLAVA, "--processor", "/nonexistent/proc", "--out", "o"],
                   _env("unreachable", tmp_path / "hub"), tmp_path)
    assert _one_line(done) == "error: --processor /nonexistent/proc: no such folder"


@pytest.mark.parametrize("mode", MODES)
def test_balance_with_the_default_model(mode: str, tmp_path: Path) -> None:
    """The default open_clip model (a hub tag) is checked before the first step: no "1/4 embed images"."""
    (tmp_path / "vocab.txt").write_text("cat\ndog\ncup\n")
    done = _curate(["balance", LLAVA, "--vocab", "vocab.txt", "--out", "o"], _env(mode, tmp_path / "hub"), tmp_path)
    line = _one_line(done)
    assert "--model ViT-B-32-quickgelu:metaclip_400m: the metaclip_400m weights" in line
    assert "--model local-dir:FOLDER" in line and "HF_HUB_OFFLINE" in line
    assert not (tmp_path / "o").exists()


def _into_cache(folder: Path, cache: Path, repo_id: str, absent: tuple[str, ...] = ("config.json",)) -> None:
    """``folder`` as the hub's download of ``repo_id`` would leave it in a Hugging Face cache: the files under
    ``snapshots/REVISION``, and under ``.no_exist/REVISION`` a marker for each file asked for that the repository
    does not hold (a processor-only repository has no model ``config.json``)."""
    revision = "0" * 40
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    shutil.copytree(folder, repo / "snapshots" / revision)
    (repo / ".no_exist" / revision).mkdir(parents=True)
    for name in absent:
        (repo / ".no_exist" / revision / name).touch()


def test_a_cached_hub_processor_packs_while_the_hub_is_unreachable(tiny_processor_dir: Path, tmp_path: Path) -> None:
    """A hub id already in the cache loads from it, without asking the unreachable hub."""
    _into_cache(tiny_processor_dir, tmp_path / "hub", "curate-tests/tiny-processor")
    done = _curate(["pack", LLAVA, "--processor", "curate-tests/tiny-processor", "--ctx", "4096", "--out", "o"],
                   _env("unreachable", tmp_path / "hub"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o" / "stats.json").is_file()
