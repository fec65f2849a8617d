"""Tokens a record's text may not hold (packer.reserved): the template's and the processor's, not grounding's."""

from __future__ import annotations

from pathlib import Path

from packer.tokens import TokenCounter


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
