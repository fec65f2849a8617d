"""Token counting and encoding against the real processor (built offline)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from packer.tokens import IGNORE_INDEX, TokenCounter, channel_first, to_template_messages


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
