"""The shared click flags of the generating verbs, through a real click command."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from curate.core.errors import UserError
from curate.generate import GenerationRequest, make_backend
from curate.cli.generate_options import backend_kwargs_from_flags, backend_options, sampling_from_flags, sampling_options


@click.command()
@backend_options
@sampling_options(temperature=0.7, max_new_tokens=64)
@click.option("--seed", type=int, default=0)
def demo(**flags: object) -> None:
    kwargs = backend_kwargs_from_flags(flags)
    sampling = sampling_from_flags(flags)
    with make_backend(**kwargs) as be:
        res = be.generate([GenerationRequest("a", [{"role": "user", "content": "q"}], n=2, sampling=sampling)])[0]
    click.echo(json.dumps({"kwargs": kwargs, "sampling": [sampling.temperature, sampling.top_p,
                                                          sampling.max_new_tokens, sampling.seed],
                           "responses": res.responses}))


def test_flags_build_a_backend_and_sampling(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "response": "x"}\n{"id": "a", "response": "y"}\n')
    result = CliRunner(env={"CURATE_API_KEY": "secret"}).invoke(demo, ["--rollouts", str(path), "--seed", "4"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["kwargs"] == {"rollouts": str(path)}  # unset flags and the env API key are left out
    assert out["sampling"] == [0.7, 1.0, 64, 4]
    assert out["responses"] == ["x", "y"]


def test_flags_for_another_backend_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "response": "x"}\n')
    result = CliRunner().invoke(demo, ["--rollouts", str(path), "--batch-size", "4"])
    assert isinstance(result.exception, UserError) and "--batch-size cannot be used with --rollouts" in str(result.exception)
    kwargs = backend_kwargs_from_flags({"endpoint": "http://127.0.0.1:1", "api_key": "k", "trust_remote_code": False,
                                        "concurrency": 2})
    assert kwargs == {"endpoint": "http://127.0.0.1:1", "api_key": "k", "concurrency": 2}
    with pytest.raises(UserError, match="--top-p"):
        sampling_from_flags({"temperature": 1.0, "top_p": 0.0, "max_new_tokens": 5, "seed": 0})
