"""AReaL: reward_fn resolved from its dotted path and called the way AReaL's RLVR workflow calls it.

AReaL does not install beside curate's pins (it needs torch < 2.11 and transformers <= 5.3),
so this test follows its documented call: ``AsyncRewardWrapper`` runs
``reward_fn(prompt, completions, prompt_ids, completion_ids, **row)`` in a
``ProcessPoolExecutor`` under ``asyncio.wait_for``; ``completions`` is the response decoded
without skipping special tokens.
"""

from __future__ import annotations

import asyncio
import importlib
from concurrent.futures import ProcessPoolExecutor
from functools import partial

import pytest

from curate.rewards.registry import score

ROWS = [  # (dataset row, decoded completion)
    ({"answer": "7", "answer_type": "number", "prompt_type": "normal"}, "<answer>7</answer><|im_end|>"),
    ({"answer": "7", "answer_type": "number", "prompt_type": "normal"}, "<answer>9</answer><|im_end|>"),
    ({"answer": "yes", "answer_type": "boolean", "prompt_type": "normal"}, "<answer>Yes</answer><|im_end|>"),
    ({"answer": "C", "answer_type": "multiple-choice", "prompt_type": "think",
      "reward": {"accuracy_ratio": 0.9, "format_ratio": 0.1}}, "<answer>(C)</answer><|im_end|>"),
]


def _resolve(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


async def _wrapped(fn, executor, *args, **kwargs) -> float:
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(executor, partial(fn, *args, **kwargs)), timeout=60)


def test_reward_fn_in_a_process_pool_like_areal() -> None:
    fn = _resolve("curate.rewards.trainers.areal.reward_fn")

    async def run() -> list[float]:
        with ProcessPoolExecutor(max_workers=1) as pool:
            return list(await asyncio.gather(*[
                _wrapped(fn, pool, "prompt text", completion, [1, 2, 3], [4, 5], **row) for row, completion in ROWS]))

    got = asyncio.run(run())
    want = [score(row, completion.replace("<|im_end|>", "")) for row, completion in ROWS]
    assert got == pytest.approx([w.reward for w in want])
    assert [w.accuracy for w in want] == [1.0, 0.0, 1.0, 1.0]
    assert want[3].reward == pytest.approx(0.9)  # the think format is missing: the record's weights apply


def test_accuracy_and_format_parts() -> None:
    from curate.rewards.trainers import areal

    row, completion = ROWS[3]
    want = score(row, "<answer>(C)</answer>")
    assert areal.accuracy_reward_fn("p", completion, [], [], **row) == want.accuracy == 1.0
    assert areal.format_reward_fn("p", completion, [], [], **row) == want.format == 0.0
    # a whole record as the answer column
    assert areal.reward_fn("p", completion, [], [], answer={"answer": "C", "answer_type": "multiple-choice"}) == 1.0
