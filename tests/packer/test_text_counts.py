"""Counting tokens piece by piece between added tokens gives the whole text's count, or is not used."""

from __future__ import annotations

import random

import pytest

from packer import text_counts
from packer.text_counts import PieceCounter
from packer.tokens import PROBE_TEXTS, TokenCounter

BITS = ["<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|vision_start|>", "<|im_end", "|>", " ", "  ", "\n", "\n\n",
        "\t", "a", "e", "\u0301", "cat", " dog", "你好", "世界", "🙂", "123", "'s", "!", "user", "assistant"]


@pytest.fixture(scope="module")
def counter(tiny_processor_dir) -> TokenCounter:
    return TokenCounter(tiny_processor_dir)


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(BITS) for _ in range(rng.randrange(0, 30))) for _ in range(n)]


def test_piece_counts_equal_whole_text_counts(counter: TokenCounter) -> None:
    pieces = PieceCounter.of(counter._backend)
    assert pieces is not None and counter._pieces is not None
    texts = _texts(0, 600) + PROBE_TEXTS
    whole = [len(ids) for ids in counter.text_ids(texts)]
    assert pieces.lengths(texts) == whole
    assert pieces.lengths(texts) == whole  # every piece known now: the same from the table
    assert counter.text_lengths(texts) == whole


def test_the_table_starts_again_when_full(counter: TokenCounter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text_counts, "MAX_KEPT", 50)
    pieces = PieceCounter.of(counter._backend)
    for seed in range(1, 6):
        texts = _texts(seed, 40)
        assert pieces.lengths(texts) == [len(ids) for ids in counter.text_ids(texts)]
        assert len(pieces._lengths) <= 50 + len(texts) * 30


def _tokenizer(**flags: bool):
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate("abcxyz <>|")}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="x"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.add_special_tokens([AddedToken("<a>", normalized=False, **flags), AddedToken("<a>b", normalized=False, **flags)])
    return tok


def test_longest_added_token_wins_as_in_the_tokenizer() -> None:
    tok = _tokenizer()
    pieces = PieceCounter.of(tok)
    assert pieces is not None
    texts = ["x<a>by", "<a><a>b<a>", "<a", "a>b<a>b<a>", "zz<a>bb"]
    assert pieces.lengths(texts) == [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]


@pytest.mark.parametrize("flag", ["lstrip", "rstrip", "single_word"])
def test_tokenizers_that_find_added_tokens_otherwise_are_counted_whole(flag: str) -> None:
    assert PieceCounter.of(_tokenizer(**{flag: True})) is None
