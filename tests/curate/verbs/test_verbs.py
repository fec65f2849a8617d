"""A verb is one function of values: the command line's flags and a recipe step's keys give it the same values, and
a recipe's check builds every step's config without running any."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from curate.cli.options import verb_command
from curate.core.errors import UserError, command_line
from curate.core.settings import default_workers
from curate.run import load_recipe, plan_run
from curate.run.plan import check_step
from curate.verbs import Prepared, Values, Verb, executor_of, verb


def _flags_values(name: str, args: list[str]) -> Values:
    """The values ``curate NAME ARGS`` hands to its verb: the verb's own options, its prepare replaced by one that
    keeps what it is given (nothing runs)."""
    spec = verb(name)
    seen: list[Values] = []
    probe = Verb(spec.name, spec.argument, spec.options, lambda values: seen.append(values) or Prepared(None, print))
    group = click.Group("curate")
    verb_command(probe, group)
    result = CliRunner().invoke(group, [name, *args])
    assert result.exit_code == 0, result.output
    return seen[0]


def test_flags_and_recipe_keys_give_the_same_values(tmp_path: Path) -> None:
    flags = _flags_values("dedup", ["in.jsonl", "--out", str(tmp_path / "o"), "--prefer", "laion, coyo", "--against",
                                    "bench/", "--near-threshold", "4", "--no-records"])
    recipe = verb("dedup").values({"inputs": ["in.jsonl"], "out": str(tmp_path / "o"), "prefer": "laion, coyo",
                                   "against": ["bench/"], "near_threshold": "4", "no_records": True})
    assert flags == recipe and flags.given == recipe.given
    assert recipe["prefer"] == ("laion", "coyo") and recipe["near_threshold"] == 4 and recipe["near"] is True
    assert recipe["workers"] == default_workers("dedup") and recipe["executor"] == "local"
    assert "seed" not in recipe.given and "near_threshold" in recipe.given


def test_a_bad_value_is_named_as_the_command_line_names_it() -> None:
    with command_line(), pytest.raises(UserError, match=r"Invalid value for '--near-threshold': 'x' is not a valid integer"):
        verb("dedup").values({"inputs": ["a"], "out": "o", "near_threshold": "x"})
    with command_line(), pytest.raises(UserError, match=r"Invalid value for '--ctx': 'many' is not a number of tokens"):
        verb("pack").values({"out": "o", "ctx": "many"})
    with command_line(), pytest.raises(UserError, match=r"Missing option '--out'"):
        verb("pack").values({})


def test_ray_options_are_refused_without_ray() -> None:
    values = verb("pack").values({"out": "o", "num_gpus": "1"})
    with command_line(), pytest.raises(UserError, match="--num-gpus is for --executor ray; drop it"):
        executor_of(values)
    ray = executor_of(verb("pack").values({"out": "o", "executor": "ray", "num_gpus": "1"}))
    assert (ray.kind, ray.workers, ray.options) == ("ray", 0, {"num_gpus": 1.0, "concurrency": None})  # fills the cluster


def test_a_recipe_check_builds_each_config_and_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('{"id": "a", "caption": "a cat"}\n', encoding="utf-8")
    (tmp_path / "proc").mkdir()
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"inputs: {{raw: {tmp_path / 'in.jsonl'}}}\nsteps:\n  - verb: pack\n    input: raw\n"
                      f"    options: {{processor: {tmp_path / 'proc'}, ctx: 8k, max-image-bytes: 2MiB}}\n"
                      "  - verb: verify\n    input: pack\n", encoding="utf-8")
    parsed = load_recipe(recipe)
    planned = plan_run(parsed, tmp_path / "out")
    pack = check_step(planned[0], parsed)
    assert pack.config.ctx == 8192 and pack.config.max_image_bytes == 2 << 20
    assert planned[0].settings["max_image_bytes"] == 2 << 20 and planned[1].values["out"] == str(tmp_path / "out" / "01-pack")
    assert "--ctx 8k" in planned[0].command and planned[1].command.endswith("01-pack")
    assert not (tmp_path / "out").exists()  # built and checked, nothing run
