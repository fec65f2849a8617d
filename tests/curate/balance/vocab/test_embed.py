"""``curate vocab embed``: concept embeddings in line order, skipped scripts, template, cache, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from curate.balance.vocab import embed as vocab_embed
from curate.core.io import file_sha256
from curate.models.encoders import load_encoder
from curate.core.errors import UserError
from curate.balance.concepts import sidecar_path
from curate.balance.vocab.embed import embed_vocab

WORDS = ["cat", "猫", "golden retriever", "espresso", "咖啡", "rocket launch", "café", "телескоп", "astronaut",
         "ねこ", "chart", "receipt", "coins", "clock", "flower", "hubble"]


def _vocab(tmp_path: Path, words: list[str] = WORDS) -> Path:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


def test_rows_follow_the_vocabulary_and_unreadable_scripts_are_zero(tiny_clip_spec: str, tmp_path: Path) -> None:
    vocab = _vocab(tmp_path)
    result = embed_vocab(vocab, out=tmp_path / "c.npy", model=tiny_clip_spec, cache_dir=tmp_path / "cache",
                         show_progress=False)
    matrix = np.load(tmp_path / "c.npy")
    assert matrix.shape == (len(WORDS), 64) and matrix.dtype == np.float16
    enc = load_encoder(tiny_clip_spec)
    latin = [i for i, w in enumerate(WORDS) if w.isascii() or w == "café"]
    others = [i for i in range(len(WORDS)) if i not in latin]
    np.testing.assert_allclose(matrix[latin].astype(np.float32), enc.encode_texts([WORDS[i] for i in latin]),
                               atol=2e-3)
    assert not matrix[others].any()
    assert result["embedded"] == len(latin)
    assert result["skipped"] == {"cjk": 3, "other": 1}  # 猫 咖啡 ねこ; телескоп (Cyrillic)
    side = json.loads(sidecar_path(tmp_path / "c.npy").read_text())
    assert side["vocab_sha256"] == file_sha256(vocab) and side["model"] == enc.fingerprint


def test_scripts_all_embeds_every_entry(tiny_clip_spec: str, tmp_path: Path) -> None:
    result = embed_vocab(_vocab(tmp_path), out=tmp_path / "c.npy", model=tiny_clip_spec, scripts="all",
                         cache_dir=tmp_path / "cache", show_progress=False)
    matrix = np.load(tmp_path / "c.npy").astype(np.float32)
    assert result["skipped_total"] == 0
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=2e-3)


def test_template_is_applied(tiny_clip_spec: str, tmp_path: Path) -> None:
    embed_vocab(_vocab(tmp_path), out=tmp_path / "c.npy", model=tiny_clip_spec, template="a photo of {}",
                cache_dir=tmp_path / "cache", show_progress=False)
    matrix = np.load(tmp_path / "c.npy").astype(np.float32)
    want = load_encoder(tiny_clip_spec).encode_texts(["a photo of cat", "a photo of astronaut"])
    np.testing.assert_allclose(matrix[[0, WORDS.index("astronaut")]], want, atol=2e-3)


@pytest.mark.parametrize("template", ["no placeholder", "{} and {}"])
def test_bad_template_is_a_user_error(tiny_clip_spec: str, tmp_path: Path, template: str) -> None:
    with pytest.raises(UserError, match="template"):
        embed_vocab(_vocab(tmp_path), model=tiny_clip_spec, template=template, cache_dir=tmp_path / "cache")


def test_repeated_line_is_a_user_error(tiny_clip_spec: str, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="repeats line"):
        embed_vocab(_vocab(tmp_path, ["cat", "dog", "cat"]), model=tiny_clip_spec, cache_dir=tmp_path / "cache")


def test_second_run_is_served_from_the_cache(tiny_clip_spec: str, tmp_path: Path) -> None:
    vocab, cache = _vocab(tmp_path), tmp_path / "cache"
    first = embed_vocab(vocab, out=tmp_path / "a.npy", model=tiny_clip_spec, cache_dir=cache, show_progress=False)
    second = embed_vocab(vocab, out=tmp_path / "b.npy", model=tiny_clip_spec, cache_dir=cache, show_progress=False)
    assert not first["cached"] and second["cached"]
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
    other = embed_vocab(vocab, model=tiny_clip_spec, cache_dir=cache, template="a photo of {}", show_progress=False)
    assert not other["cached"] and other["key"] != first["key"]
    vocab.write_text("\n".join(WORDS[:-1]) + "\n", encoding="utf-8")  # another vocabulary, another key
    changed = embed_vocab(vocab, model=tiny_clip_spec, cache_dir=cache, show_progress=False)
    assert not changed["cached"] and changed["rows"] == len(WORDS) - 1


def test_a_killed_run_resumes_chunk_by_chunk(tiny_clip_spec: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(vocab_embed, "CHUNK", 4)
    vocab = _vocab(tmp_path)
    reference = embed_vocab(vocab, model=tiny_clip_spec, cache_dir=tmp_path / "ref", show_progress=False)

    enc = load_encoder(tiny_clip_spec)
    real = enc.encode_tokens
    calls = {"n": 0}

    def dies_on_third_chunk(tokens):  # noqa: ANN001, ANN202 - simulates the process being killed
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(tokens)

    monkeypatch.setattr(enc, "encode_tokens", dies_on_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        embed_vocab(vocab, encoder=enc, cache_dir=tmp_path / "run", show_progress=False)
    parts = sorted((tmp_path / "run").glob("*/parts/*.npy"))
    assert [p.name for p in parts] == ["000000.npy", "000001.npy"]

    calls["n"] = -100  # no more failures; count the chunks the rerun embeds
    result = embed_vocab(vocab, encoder=enc, cache_dir=tmp_path / "run", show_progress=False)
    assert calls["n"] == -100 + 2  # only chunks 2 and 3 were embedded again
    assert Path(result["path"]).read_bytes() == Path(reference["path"]).read_bytes()


def test_sharded_chunks_equal_the_in_process_path(tiny_clip_spec, tmp_path) -> None:
    """The chunks run as shards of a stage (the path --executor ray takes) give the same bytes."""
    from curate.executors import get_executor
    from curate.balance.vocab.embed import CHUNK, embed_vocab

    words = [f"concept{i}" for i in range(CHUNK + 500)] + ["猫", "狗"]
    vocab = tmp_path / "v.txt"
    vocab.write_text("\n".join(words) + "\n", encoding="utf-8")
    here = embed_vocab(vocab, out=tmp_path / "a.npy", model=tiny_clip_spec, cache_dir=tmp_path / "c1",
                       show_progress=False)
    sharded = embed_vocab(vocab, out=tmp_path / "b.npy", model=tiny_clip_spec, cache_dir=tmp_path / "c2",
                          show_progress=False, executor=get_executor("local", workers=1))
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
    assert here["embedded"] == sharded["embedded"] == CHUNK + 500 and sharded["skipped"] == {"cjk": 2}
