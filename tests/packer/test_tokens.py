"""Token counting, piece counts and reserved tokens against the real processor (built offline)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from packer import tokens
from packer.tokens import IGNORE_INDEX, TokenCounter, channel_first, to_template_messages, PieceCounter, PROBE_TEXTS


@pytest.fixture(scope="module")
def counter(tiny_processor_dir) -> TokenCounter:
    return TokenCounter(tiny_processor_dir)


CONVERSATIONS = [
    [{"role": "user", "content": "<image>\nDescribe the image."},
     {"role": "assistant", "content": "A tabby cat asleep on a red sofa."}],
    [{"role": "user", "content": "Compare <image> and <image>. Which is brighter?"},
     {"role": "assistant", "content": "The second one."},
     {"role": "user", "content": "为什么？"},
     {"role": "assistant", "content": "因为它的背景是白色的。"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
]
SIZES = [[(90, 60)], [(40, 30), (3000, 120)], []]


@pytest.mark.parametrize("case", range(3))
def test_header_count_equals_full_processor(counter: TokenCounter, case: int) -> None:
    messages, sizes = CONVERSATIONS[case], SIZES[case]
    images = [Image.new("RGB", size, (i * 40, 100, 200)) for i, size in enumerate(sizes)]
    exact, grids = counter.count_exact(messages, images)
    text_len = len(counter.text_ids([counter.render(messages)])[0])
    header = counter.count(text_len, [counter.image_tokens(h, w) for w, h in sizes])
    assert header == exact
    assert grids == [list(counter.image_grid(h, w)) for w, h in sizes]
    assert counter.render(messages) == counter.render_reference(messages)


def test_encode_labels_only_assistant_turns(counter: TokenCounter) -> None:
    messages = CONVERSATIONS[1]
    image_tokens = [counter.image_tokens(30, 40), counter.image_tokens(120, 3000)]
    ids, labels = counter.encode(messages, image_tokens)
    exact, _ = counter.count_exact(messages, [Image.new("RGB", (40, 30)), Image.new("RGB", (3000, 120))])
    assert len(ids) == len(labels) == exact
    trained = counter.tokenizer.decode([t for t, l in zip(ids, labels) if l != IGNORE_INDEX])
    assert "The second one." in trained and "因为它的背景是白色的。" in trained
    assert "Which is brighter" not in trained and "为什么" not in trained and "system" not in trained
    pad = counter.image_token_id
    assert sum(t == pad for t in ids) == sum(image_tokens)
    assert all(l == IGNORE_INDEX for t, l in zip(ids, labels) if t == pad)


def test_fingerprint_tracks_pixel_bounds(tiny_processor_dir) -> None:
    a = TokenCounter(tiny_processor_dir)
    b = TokenCounter(tiny_processor_dir, max_pixels=28 * 28 * 64)
    assert a.fingerprint != b.fingerprint
    assert b.image_tokens(2000, 2000) <= 64 < a.image_tokens(2000, 2000)


def test_extreme_aspect_ratio_is_reported(counter: TokenCounter) -> None:
    with pytest.raises(ValueError):
        counter.image_grid(10, 5000)


def test_check_skips_only_pixel_arithmetic(counter: TokenCounter) -> None:
    """The full processor's check runs without rescaling or normalising pixels: its ids and grids equal a default
    run of the processor (which does both) at every size, small, large and narrow."""
    assert counter.pixel_kwargs == {"do_rescale": False, "do_normalize": False}
    messages = CONVERSATIONS[0]
    text = counter.render(messages)
    for size in [(90, 60), (28, 28), (1500, 1100), (3000, 120), (57, 1003)]:
        image = Image.new("RGB", size, (30, 100, 200))
        full = counter.processor(text=[text], images=[image], return_tensors="np")
        exact, grids = counter.count_exact(messages, [image])
        assert exact == full["input_ids"].shape[1] and grids == full["image_grid_thw"].tolist()
        skipped = counter.processor(text=[text], images=[image], return_tensors="np", **counter.pixel_kwargs)
        assert skipped["pixel_values"].dtype != full["pixel_values"].dtype or \
            not (skipped["pixel_values"] == full["pixel_values"]).all()  # the arithmetic was indeed skipped


def test_direct_render_equals_transformers_renderer(counter: TokenCounter) -> None:
    """The compiled template rendered directly gives render_jinja_template's text, with and without a generation
    prompt, for every conversation of these tests."""
    assert counter._direct is not None
    for messages in CONVERSATIONS:
        chat = to_template_messages(messages)
        for gen in (False, True):
            assert counter._direct(chat, gen) == counter._render_whole(chat, gen)
            assert counter.render(messages, add_generation_prompt=gen) == counter._render_whole(chat, gen)


def test_check_hands_rgb_images_over_channel_first(counter: TokenCounter) -> None:
    """RGB images reach the processor as (3, height, width) arrays: ids, grids and every pixel value equal the run
    on the Pillow image, on random pixels at uneven sizes; other modes go in as Pillow images."""
    assert counter.layout is channel_first
    text = counter.render(CONVERSATIONS[0])
    rng = np.random.default_rng(3)
    for width, height in [(71, 45), (1501, 1103), (2990, 121), (29, 1007)]:
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")
        pil = counter._process(text, [image])
        bands = counter._process(text, [image], channel_first)
        assert sorted(pil) == sorted(bands)
        for key in pil:
            assert np.array_equal(np.asarray(pil[key]), np.asarray(bands[key])), key
    for mode in ("L", "RGBA", "P"):
        image = Image.new(mode, (300, 200))
        full = counter.processor(text=[text], images=[image], return_tensors="np")
        assert counter.count_exact(CONVERSATIONS[0], [image]) == (full["input_ids"].shape[1],
                                                                 full["image_grid_thw"].tolist())


def test_channel_first_layout_is_checked_at_load(counter: TokenCounter) -> None:
    """A layout the processor would read differently is refused by the load-time probe: the bands in the wrong
    order (BGR) give other pixel values on the probe's random pixels."""
    def reversed_bands(image: Image.Image) -> np.ndarray:
        return channel_first(image)[::-1].copy()

    assert counter.layout_agrees(channel_first)
    assert not counter.layout_agrees(reversed_bands)


# Counting tokens piece by piece between added tokens gives the whole text's count, or is not used.
BITS = ["<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|vision_start|>", "<|im_end", "|>", " ", "  ", "\n", "\n\n",
        "\t", "a", "e", "\u0301", "cat", " dog", "你好", "世界", "🙂", "123", "'s", "!", "user", "assistant"]


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
    monkeypatch.setattr(tokens, "MAX_KEPT", 50)
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


# Tokens a record's text may not hold (packer.tokens): the template's and the processor's, not grounding's.
def test_the_template_markers_and_placeholders_are_reserved_grounding_tokens_are_not(tiny_processor_dir: Path) -> None:
    counter = TokenCounter(tiny_processor_dir)
    reserved = set(counter.reserved.tokens)
    assert {"<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"} <= reserved
    assert not {"<|box_start|>", "<|object_ref_start|>", "<|quad_start|>"} & reserved  # grounding data writes them
    user = [{"role": "user", "content": "<image>\nWhat is <|image_pad|>?"}, {"role": "assistant", "content": "x"}]
    assert "'<|image_pad|>'" in (counter.reserved.find(user) or "")
    box = [{"role": "user", "content": "<image>\nWhere?"},
           {"role": "assistant", "content": "<|object_ref_start|>cat<|object_ref_end|><|box_start|>(1,2),(3,4)<|box_end|>"}]
    assert counter.reserved.find(box) is None
    assert counter.reserved.find([{"role": "assistant", "content": "done<|im_end|>"}]) is not None
