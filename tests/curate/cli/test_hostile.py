"""Hostile files and flags through the real CLI (issue 36): one line on stderr, a non-zero exit, no traceback.

Like tests/curate/cli/test_mistakes.py, the table runs in-process through :func:`curate.cli.main`; the files it
names are made here: truncated model weights, a CLIP config of the wrong shape, a chat template that does not parse,
stats files cut short or holding a list, a responses "Parquet" of text, recipes that are binary, nest 1,100 deep,
grow to megabytes through variables, refer to themselves, or are a FIFO, a lengths table with null counts. Values
whose cost grows with them are refused before any work, and flags of a mode not chosen are refused rather than
ignored. The YAML alias bomb runs as a child process group under time and memory limits (it would take gigabytes).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from curate.cli import main
from tests._fixtures.hostile import PEAK_RSS, run_limited


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, tiny_clip_spec: str, tiny_vlm_dir: Path,
       tiny_processor_dir: Path) -> dict[str, str]:
    """The table's files (see the module docstring); their paths by name, for the lines' ``{name}``."""
    d = tmp_path_factory.mktemp("hostile")
    Image.fromarray(np.full((32, 48, 3), 128, np.uint8)).save(d / "good.png")
    (d / "recs.jsonl").write_text(json.dumps({"id": "a", "caption": "a grey square", "images": ["good.png"]}) + "\n")
    (d / "rl.jsonl").write_text(json.dumps({"id": "q", "problem": "1+1?", "answer": "2", "answer_type": "number"})
                                + "\n")
    (d / "answers4.jsonl").write_text("".join(json.dumps({"id": "q", "response": f"<answer>{k}</answer>"}) + "\n"
                                              for k in range(4)))
    (d / "v.txt").write_text("cat\ndog\n")
    emb = d / "emb"
    emb.mkdir()
    np.save(emb / "000000.npy", np.eye(2, 4, dtype=np.float16))
    pq.write_table(pa.table({"id": ["a", "b"], "source": ["s", "s"]}), emb / "000000.ids.parquet")
    np.save(d / "ok.npy", np.eye(3, 4, dtype=np.float16))
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(54)], "source": ["web"] * 54,
                             "concepts": pa.array([rng.choice(20, 3, replace=False).tolist() for _ in range(54)],
                                                  pa.list_(pa.int32()))}), d / "tags.parquet")
    for name, text in (("trunc", '{"stage": "pack", "records_in": 3, "settings": {"ctx'), ("list", "[1, 2]")):
        (d / name).mkdir()
        (d / name / "stats.json").write_text(text)
    (d / "garbage.parquet").write_text("id,response\nq,2\n")
    (d / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    (d / "deep.yaml").write_text("steps: " + "[" * 1100 + "]" * 1100 + "\n")
    (d / "chain.yaml").write_text("vars:\n  v0: 0123456789\n" + "".join(f"  v{i}: ${{v{i - 1}}}${{v{i - 1}}}\n"
                                                                       for i in range(1, 30))
                                  + "out: ${v29}\nsteps:\n  - verb: pack\n")
    (d / "cycle.yaml").write_text("vars:\n  a: ${b}\n  b: ${a}\ninputs:\n  raw: ${a}\nsteps:\n  - verb: pack\n"
                                  "    input: raw\n")
    os.mkfifo(d / "fifo.yaml")
    (d / "nulls").mkdir()
    pq.write_table(pa.table({"id": ["a", "b", "c"], "tokens": pa.array([5, None, 7], pa.int32())}),
                   d / "nulls" / "lengths.parquet")
    clip = Path(tiny_clip_spec.split(":", 1)[1])
    shutil.copytree(clip, d / "badclip")
    _truncate(d / "badclip" / "open_clip_model.safetensors", 5000)
    shutil.copytree(clip, d / "shapeclip")
    config = json.loads((clip / "open_clip_config.json").read_text())
    config["model_cfg"]["embed_dim"] = 32
    (d / "shapeclip" / "open_clip_config.json").write_text(json.dumps(config))
    shutil.copytree(tiny_vlm_dir, d / "badvlm")
    _truncate(d / "badvlm" / "model.safetensors", 5000)
    shutil.copytree(tiny_processor_dir, d / "badproc")
    (d / "badproc" / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }{% endfor %}")
    return {"d": str(d), "clip": tiny_clip_spec, "proc": str(tiny_processor_dir), "badclip": f"local-dir:{d}/badclip",
            "shapeclip": f"local-dir:{d}/shapeclip", "badvlm": str(d / "badvlm"), "badproc": str(d / "badproc")}


REC = "{d}/recs.jsonl"
RL = "rl-filter {d}/rl.jsonl --rollouts {d}/answers4.jsonl --out {d}/f"
RS = "resample --tags {d}/tags.parquet --out {d}/r"
TAG = "tag --embeddings {d}/emb --concepts {d}/ok.npy --out {d}/t"

#: (issue 36 case, the command with {names} of ``ws``, text the one line must hold)
HOSTILE: list[tuple[str, str, str]] = [
    # nonsense accepted before
    ("empty input path", "pack '' --processor {proc} --out {d}/p", "an empty path"),
    ("same input twice", f"pack {REC} {REC} --processor {{proc}} --out {{d}}/p", "named twice"),
    ("vocab build --out dir/", "vocab build --out {d}/newdir/ --size 2 --no-wordfreq --word-list {d}/v.txt",
     "is a folder"),
    ("--band outside [0, 1]", f"{RL} --band 5,10", "--band 5,10 holds no value"),
    ("--min-gap 2", f"{RL} --min-gap 2", "--min-gap must be within [0, 1]"),
    ("--min-gap -1", f"{RL} --min-gap -1", "--min-gap must be within [0, 1]"),
    ("--n above the rollouts", f"{RL} --n 16", "holds at most 4 answers per prompt"),
    ("--nlist without IVF", f"{TAG} --nlist 4", "--nlist is for --index ivf"),
    ("balance --text-field in embeddings mode", f"balance {REC} --vocab {{d}}/v.txt --out {{d}}/b --text-field caption",
     "--text-field is for --match text"),
    ("--num-gpus with the local executor", f"embed {REC} --out {{d}}/e --num-gpus 1",
     "--num-gpus is for --executor ray"),
    ("--t with --mode inverse", f"{RS} --fraction 0.5 --t 5", "--t is MetaCLIP's"),
    ("resample --records unrelated", f"{RS} --fraction 0.5 --records {REC}", "none of the 27 selected records"),
    ("report --seed -5", "report {d}/list --seed -5", "--seed must be >= 0"),
    # counts that overflowed
    ("resample --target 1e12", f"{RS} --target 1000000000000", "a record would be drawn"),
    ("resample --fraction 1e10", f"{RS} --fraction 10000000000", "a record would be drawn"),
    ("--lengths with a null count", "pack --lengths {d}/nulls/lengths.parquet --plan-only --ctx 64 --out {d}/p",
     "no token count (null)"),
    # values accepted at unbounded cost
    ("--balance-compute --dp 1e8", f"pack {REC} --processor {{proc}} --out {{d}}/p --balance-compute --dp 100000000",
     "--dp 100,000,000: at most"),
    ("rl-filter --n 1e9", f"{RL} --n 1000000000", "--n 1,000,000,000: at most"),
    ("tag --top-k 1e8", f"{TAG} --top-k 100000000", "--top-k 100,000,000: at most"),
    ("recaption --max-new-tokens 1e10",
     f"recaption {REC} --rollouts {{d}}/answers4.jsonl --out {{d}}/c --max-new-tokens 10000000000",
     "--max-new-tokens 10,000,000,000: at most"),
    ("a ${var} chain", "run {d}/chain.yaml --out {d}/run", "grows to"),
    # tracebacks from files and flags
    ("truncated CLIP weights: embed", f"embed {REC} --model {{badclip}} --out {{d}}/e",
     "could not load the model (SafetensorError"),
    ("truncated CLIP weights: vocab embed", "vocab embed --vocab {d}/v.txt --model {badclip} --out {d}/c.npy",
     "could not load the model (SafetensorError"),
    ("truncated CLIP weights: balance", f"balance {REC} --vocab {{d}}/v.txt --model {{badclip}} --out {{d}}/b",
     "could not load the model (SafetensorError"),
    ("truncated VLM weights: recaption", f"recaption {REC} --model {{badvlm}} --out {{d}}/c", "cannot load it"),
    ("CLIP config of the wrong shape", f"embed {REC} --model {{shapeclip}} --out {{d}}/e", "size mismatch"),
    ("chat template that does not parse", f"pack {REC} --processor {{badproc}} --out {{d}}/p",
     "its chat template does not render (TemplateSyntaxError"),
    ("report on a truncated stats.json", "report {d}/trunc", "{d}/trunc/stats.json: not a readable stats file"),
    ("report on a stats.json holding a list", "report {d}/list", "holds a JSON list"),
    ("recaption --mix en=inf", f"recaption {REC} --rollouts {{d}}/answers4.jsonl --out {{d}}/c --mix en=inf",
     "finite weights"),
    ("score with a garbage responses Parquet", "score --records {d}/rl.jsonl --responses {d}/garbage.parquet "
     "--out {d}/s", "not a readable Parquet file"),
    ("run on a binary file", "run {d}/binary.yaml --out {d}/run", "not UTF-8"),
    ("a recipe nested 1,100 deep", "run {d}/deep.yaml --out {d}/run", "nested too deep"),
    ("a recursive ${a} -> ${b} -> ${a}", "run {d}/cycle.yaml --out {d}/run", "cycle (${{a}} -> ${{b}} -> ${{a}})"),
    ("a recipe that is a FIFO", "run {d}/fifo.yaml --out {d}/run", "not a regular file"),
    ("--max-image-bytes garbage", f"embed {REC} --out {{d}}/e --max-image-bytes lots", "not a size in bytes"),
]


def _one_line(err: str) -> str:
    """The one error line (progress lines of the work done before a run stopped may precede it)."""
    lines = [ln for ln in err.splitlines() if ln.startswith("error:") or ln.startswith(" ")]
    assert len(lines) == 1 and lines[0].startswith("error:"), f"expected one error line:\n{err}"
    return lines[0]


@pytest.mark.parametrize("case, line, expected", HOSTILE, ids=[c for c, _, _ in HOSTILE])
def test_hostile_input_gives_one_line(ws: dict[str, str], case: str, line: str, expected: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(shlex.split(line.format(**ws)))
    captured = capsys.readouterr()
    assert exc.value.code not in (0, None), case
    assert "Traceback" not in captured.err + captured.out
    message = _one_line(captured.err)
    assert message.startswith("error:") and expected.format(**ws) in message, message


BOMB = "".join(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['x'] * 9)}]\n"
               for prev, name in zip(["", *"abcdefgh"], "abcdefghi"))  # 9**9 = 387M strings once expanded


def test_a_yaml_alias_bomb_is_refused_within_limits(tmp_path: Path) -> None:
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(BOMB)
    code, err, peak = run_limited(["run", str(recipe), "--out", str(tmp_path / "run")], tmp_path, seconds=60)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert "expands to more than" in _one_line(err) and peak < PEAK_RSS


def test_the_image_limit_flags_state_their_real_defaults() -> None:
    """The flags are declared without importing the image gate (no Pillow for ``--help``): their help states the
    defaults, which must be the gate's and the record loop's."""
    from curate.core.limits import DEFAULT_MAX_IMAGES
    from curate.core.images import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS
    from curate.verbs import IMAGE_LIMITS

    helps = {o.name: o.help for o in IMAGE_LIMITS}
    assert f"[default: {DEFAULT_MAX_BYTES // 2**20}MiB]" in helps["max_image_bytes"]
    assert f"[default: {DEFAULT_MAX_PIXELS}]" in helps["max_image_pixels"]
    assert f"[default: {DEFAULT_MAX_IMAGES}]" in helps["max_images_per_record"]
