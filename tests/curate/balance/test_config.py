"""curate balance's settings: its step configs nested, each setting declared once (``top_k`` on tag and match)."""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.balance.config import STEPS, BalanceConfig, MatchConfig, TagConfig


def _vocab(tmp_path: Path) -> Path:
    path = tmp_path / "vocab.txt"
    path.write_text("cat\ndog\n")
    return path


def test_top_k_is_declared_once_and_each_step_keeps_its_default(tmp_path: Path) -> None:
    tag, match = TagConfig.__dataclass_fields__["top_k"], MatchConfig.__dataclass_fields__["top_k"]
    assert tag.metadata == match.metadata and tag.default is None and match.default is None
    assert "top_k" not in BalanceConfig.__dataclass_fields__
    assert TagConfig(out=tmp_path / "t").top_k == 5 and MatchConfig(out=tmp_path / "m").top_k is None
    embeddings = BalanceConfig(out=tmp_path / "b", vocab=_vocab(tmp_path))
    assert embeddings.tag.top_k == 5 and embeddings.text is None
    text = BalanceConfig(out=tmp_path / "b", vocab=_vocab(tmp_path), match="text", top_k=3, rules="metaclip")
    assert text.text is not None and (text.text.top_k, text.text.rules, text.text.per) == (3, "metaclip", "text")
    assert text.tag.top_k == 3  # one flag sets every step that declares it


def test_a_setting_goes_to_every_step_that_declares_it_and_no_other(tmp_path: Path) -> None:
    config = BalanceConfig(out=tmp_path / "b", vocab=_vocab(tmp_path), model="ViT-X:y", seed=7, batch_size=8,
                           text_batch_size=16, shard_size=3, nprobe=4, temperature=0.5, template="a {}")
    assert set(STEPS) == {"embed", "vocab", "tag", "resample", "text"}
    assert (config.embed.model, config.vocab.model) == ("ViT-X:y", "ViT-X:y")
    assert (config.embed.seed, config.tag.seed, config.resample.seed) == (7, 7, 7)
    assert (config.embed.batch_size, config.vocab.batch_size) == (8, 16)
    assert (config.embed.shard_size, config.tag.nprobe, config.resample.temperature) == (3, 4, 0.5)
    assert config.vocab.template == "a {}" and config.resample.fraction == 0.5  # the default fraction
    with pytest.raises(TypeError, match="unknown setting.*top_kk"):
        BalanceConfig(out=tmp_path / "b", vocab=_vocab(tmp_path), top_kk=3)
