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
    (tmp_path / "v.gloss.tsv").write_text("猫\tcat\n", encoding="utf-8")  # 狗 has none
    here = embed_vocab(vocab, out=tmp_path / "a.npy", model=tiny_clip_spec, cache_dir=tmp_path / "c1",
                       show_progress=False)
    sharded = embed_vocab(vocab, out=tmp_path / "b.npy", model=tiny_clip_spec, cache_dir=tmp_path / "c2",
                          show_progress=False, executor=get_executor("local", workers=1))
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
    assert here["embedded"] == sharded["embedded"] == CHUNK + 501 and sharded["skipped"] == {"cjk": 1}
    assert sharded["embedded_by_gloss"] == 1


def test_chinese_entries_are_embedded_through_their_gloss(tiny_clip_spec: str, tmp_path: Path) -> None:
    """An English text tower reads a Chinese entry through the gloss file beside the vocabulary; an entry with no
    gloss stays a zero row, counted as skipped; the gloss file is part of the cache key."""
    words = ["cat", "猫", "咖啡", "телескоп", "狗"]
    vocab = _vocab(tmp_path, words)
    kwargs = {"model": tiny_clip_spec, "cache_dir": tmp_path / "cache", "show_progress": False}
    without = embed_vocab(vocab, out=tmp_path / "a.npy", **kwargs)
    assert without["skipped"] == {"cjk": 3, "other": 1} and without["embedded_by_gloss"] == 0
    (tmp_path / "vocab.gloss.tsv").write_text("猫\tcat\n咖啡\tcoffee\n", encoding="utf-8")
    result = embed_vocab(vocab, out=tmp_path / "b.npy", **kwargs)
    assert not result["cached"] and result["gloss_sha256"] == file_sha256(tmp_path / "vocab.gloss.tsv")
    assert result["embedded"] == 3 and result["embedded_by_gloss"] == 2
    assert result["skipped"] == {"cjk": 1, "other": 1}  # 狗 has no gloss, телескоп is not Chinese
    matrix = np.load(tmp_path / "b.npy").astype(np.float32)
    enc = load_encoder(tiny_clip_spec)
    np.testing.assert_allclose(matrix[[1, 2]], enc.encode_texts(["cat", "coffee"]), atol=2e-3)
    np.testing.assert_array_equal(matrix[1], matrix[0])  # 猫 is embedded as "cat"
    assert not matrix[[3, 4]].any()
    (tmp_path / "vocab.gloss.tsv").write_text("猫\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"vocab.gloss.tsv:1: expected 'entry<TAB>gloss'"):
        embed_vocab(vocab, out=tmp_path / "c.npy", **kwargs)


def test_a_multilingual_tower_embeds_the_chinese_entry_itself(tiny_clip_spec: str, tmp_path: Path) -> None:
    words = ["cat", "猫"]
    vocab = _vocab(tmp_path, words)
    (tmp_path / "vocab.gloss.tsv").write_text("猫\tcat\n", encoding="utf-8")
    result = embed_vocab(vocab, out=tmp_path / "a.npy", model=tiny_clip_spec, cache_dir=tmp_path / "cache",
                         show_progress=False, scripts="all")
    assert result["embedded"] == 2 and result["embedded_by_gloss"] == 0 and result["skipped_total"] == 0
    matrix = np.load(tmp_path / "a.npy").astype(np.float32)
    assert not np.allclose(matrix[0], matrix[1], atol=1e-3)  # 猫 itself, not its gloss
