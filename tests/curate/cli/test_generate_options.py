"""The shared options of the generating verbs (curate/verbs/generate.py), through a real click command."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from curate.cli.options import config_options, options
from curate.core.errors import UserError, command_line
from curate.generate.base import GenerationRequest, SamplingParams
from curate.generate import make_backend
from curate.generate.settings import BackendSettings, sampling_of
from curate.recaption.config import RecaptionConfig
from curate.verbs.generate import BACKEND_OPTIONS, backend_of


@click.command()
@options(*BACKEND_OPTIONS)
@config_options(RecaptionConfig, "temperature", "top_p", "max_new_tokens")
@click.option("--seed", type=int, default=0)
def demo(**flags: object) -> None:
    kwargs = backend_of(flags).kwargs()
    sampling = SamplingParams(**sampling_of(type("Flags", (), flags)))
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
    assert out["sampling"] == [0.7, 0.9, 512, 4]  # recaption's defaults, from its config's fields
    assert out["responses"] == ["x", "y"]


def test_flags_for_another_backend_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "response": "x"}\n')
    with command_line():  # as under `curate`: the message names flags
        result = CliRunner().invoke(demo, ["--rollouts", str(path), "--batch-size", "4"])
    assert isinstance(result.exception, UserError) and "--batch-size cannot be used with --rollouts" in str(result.exception)
    given = BackendSettings(endpoint="http://127.0.0.1:1", api_key="k", trust_remote_code=False, concurrency=2)
    kwargs = given.kwargs()
    assert kwargs == {"endpoint": "http://127.0.0.1:1", "api_key": "k", "concurrency": 2}
    with pytest.raises(UserError, match="top_p"):
        RecaptionConfig(out=tmp_path / "o", backend={"rollouts": str(path)}, top_p=0.0)
