"""Multimodal rotary positions against the model's own implementation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from packer.rope import mrope_positions
from packer.tokens import TokenCounter


def test_mrope_matches_qwen2vl_get_rope_index(tiny_vlm_dir) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir)
    counter = TokenCounter(tiny_vlm_dir)
    messages = [{"role": "user", "content": "Look: <image> then <image> done"},
                {"role": "assistant", "content": "Two pictures."}]
    sizes = [(60, 90), (300, 50)]  # (h, w)
    grids = [list(counter.image_grid(h, w)) for h, w in sizes]
    ids, _ = counter.encode(messages, [counter.image_tokens(h, w) for h, w in sizes])
    ours = mrope_positions(ids, counter.image_token_id, grids, counter.image_rule.merge_size)
    get_rope_index = getattr(model, "get_rope_index", None) or model.model.get_rope_index
    input_ids = torch.tensor([ids])
    kwargs = {"input_ids": input_ids, "image_grid_thw": torch.tensor(grids), "attention_mask": torch.ones_like(input_ids)}
    try:
        theirs, _ = get_rope_index(**kwargs)
    except TypeError:
        kwargs["mm_token_type_ids"] = (input_ids == counter.image_token_id).long()
        theirs, _ = get_rope_index(**kwargs)
    assert np.array_equal(ours, theirs[:, 0].numpy())


def test_text_only_positions_are_a_range() -> None:
    pos = mrope_positions([5, 6, 7, 8], image_token_id=99, grids=[], merge_size=2)
    assert pos.tolist() == [[0, 1, 2, 3]] * 3
    with pytest.raises(ValueError):
        mrope_positions([5, 99, 99], image_token_id=99, grids=[[1, 4, 4]], merge_size=2)
