"""Settings declared once: the config field carries default, help and flag; the CLI makes its option from it."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import click
import pytest
from click.testing import CliRunner

from curate.cli.options import config_options
from curate.core.settings import parse_token_count, setting, settings_of

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class DemoConfig:
    out: PathLike = setting(help="Output folder.")
    ctx: int = setting(8192, help="Tokens per sequence.")
    ratio: float | None = setting(None, help="A share.", metavar="R")
    exact: bool = setting(False, help="Decode every image.")
    plot: bool = setting(True, help="Write the plot.")
    mode: str = setting("inverse", help="How to weigh.", choices=("inverse", "metaclip"))
    hidden: int = setting(3, help="Set by callers only.", cli=False)
    plain: int = 7


def test_settings_carry_what_the_command_line_needs() -> None:
    infos = {i.name: i for i in settings_of(DemoConfig)}
    assert list(infos) == ["out", "ctx", "ratio", "exact", "plot", "mode"]  # no cli=False, no undeclared field
    assert infos["out"].required and infos["out"].type is os.PathLike and infos["out"].flag == "--out"
    assert (infos["ctx"].type, infos["ctx"].default, infos["ctx"].help) == (int, 8192, "Tokens per sequence.")
    assert infos["ratio"].optional and infos["ratio"].type is float and infos["ratio"].metavar == "R"


def test_options_made_from_the_config_give_the_config_its_values() -> None:
    @click.command()
    @config_options(DemoConfig)
    def demo(**settings: object) -> None:
        click.echo(repr(dataclasses.asdict(DemoConfig(**settings))))

    help_text = CliRunner().invoke(demo, ["--help"]).output
    for needle in ("--out PATH", "Tokens per sequence.", "[default: 8192]", "--plot / --no-plot", "--ratio R",
                   "[inverse|metaclip]"):
        assert needle in help_text, needle
    got = CliRunner().invoke(demo, ["--out", "o", "--ctx", "10", "--no-plot", "--exact", "--mode", "metaclip"])
    assert got.exit_code == 0, got.output
    assert eval(got.output) == {"out": "o", "ctx": 10, "ratio": None, "exact": True, "plot": False,  # noqa: S307
                                "mode": "metaclip", "hidden": 3, "plain": 7}
    assert CliRunner().invoke(demo, ["--ctx", "3"]).exit_code == 2  # --out is required


def test_build_config_refuses_a_value_no_field_takes() -> None:
    import pytest

    from curate.balance.config import TagConfig
    from curate.core.errors import UserError
    from curate.core.settings import build_config

    with pytest.raises(UserError, match="top.k must be at least 1"):
        build_config(TagConfig, {"out": "x", "top_k": 0})
    with pytest.raises(TypeError, match=r"^TagConfig has no setting top_kk; did you mean top_k\?$"):
        build_config(TagConfig, {"out": "x", "top_kk": 3})
    config = build_config(TagConfig, {"out": "x", "top_k": None}, seed=3)
    assert (config.top_k, config.seed) == (5, 3)  # top_k unset: the tag default, declared once


@pytest.mark.parametrize("text, tokens", [("8192", 8192), ("8k", 8192), ("8K", 8192), (" 32k ", 32768),
                                          ("1.5k", 1536), ("1M", 1 << 20), ("128_000", 128000), (4096, 4096)])
def test_token_counts(text: object, tokens: int) -> None:
    assert parse_token_count(text) == tokens


@pytest.mark.parametrize("text", ["8q", "k", "", "1.3k", "nan", "8 k k", True])
def test_not_token_counts(text: object) -> None:
    with pytest.raises(ValueError, match="tokens"):
        parse_token_count(text)
