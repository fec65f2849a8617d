"""verl: compute_score loaded from its file path and called the way verl's naive reward manager calls it.

verl does not install beside curate's pins (verl 0.9 needs transformers < 5.11, 0.5-0.8 need
numpy < 2, 0.4 needs pkg_resources and omegaconf 1.x), so this test follows its documented
call: load ``custom_reward_function.path`` by file, decode each valid response with
``skip_special_tokens=True``, call ``compute_score(data_source=, solution_str=, ground_truth=,
extra_info=)`` per item, put ``score`` at the last valid response token and collect the other
keys as ``reward_extra_info``.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from curate.rewards.registry import score
from curate.rewards.trainers import verl as adapter

ITEMS = [  # (ground truth, extra_info, response)
    ({"answer": ["7"], "answer_type": "number", "prompt_type": "normal"}, {}, "<answer>7</answer>"),
    ({"answer": ["7"], "answer_type": "number", "prompt_type": "normal"}, {}, "<answer>8</answer>"),
    ({"answer": ["B", "b"], "answer_type": "multiple-choice", "prompt_type": "think"}, {},
     "<think>" + "B looks right. " * 5 + "</think><answer>(B)</answer>"),
    ({"answer": ["\\frac{1}{2}"], "answer_type": "math-expressions", "prompt_type": "normal"}, {}, "<answer>0.5</answer>"),
    ({"answer": ["yes"], "answer_type": None, "prompt_type": None}, {"answer_type": "boolean"}, "Yes"),
]


def _load(path: str, name: str):
    """What verl's ``load_extern_object`` does with ``custom_reward_function.path``/``name``."""
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _naive_manager(batch: dict, tokenizer, compute_score) -> tuple[torch.Tensor, dict]:
    reward = torch.zeros_like(batch["responses"], dtype=torch.float32)
    extra = defaultdict(list)
    plen = batch["prompts"].shape[-1]
    for i in range(len(batch["responses"])):
        valid = int(batch["attention_mask"][i, plen:].sum())
        text = tokenizer.decode(batch["responses"][i, :valid], skip_special_tokens=True)
        out = compute_score(data_source=batch["data_source"][i], solution_str=text,
                            ground_truth=batch["reward_model"][i]["ground_truth"], extra_info=batch["extra_info"][i])
        for k, v in (out.items() if isinstance(out, dict) else ()):
            extra[k].append(v)
        reward[i, valid - 1] = out["score"] if isinstance(out, dict) else out
    return reward, extra


def _batch(tokenizer, parquet: Path) -> dict:
    import pandas as pd

    rows = pd.read_parquet(parquet).to_dict("records")  # what verl's dataset hands on: numpy arrays inside
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    prompts = [tokenizer.encode(f"question {i}") for i in range(len(rows))]
    responses = [tokenizer.encode(r) + [eos] for _, _, r in ITEMS]
    plen, rlen = max(map(len, prompts)), max(map(len, responses)) + 2
    p = torch.full((len(rows), plen), pad)
    r = torch.full((len(rows), rlen), pad)
    mask = torch.zeros((len(rows), plen + rlen), dtype=torch.long)
    for i, (pi, ri) in enumerate(zip(prompts, responses)):
        p[i, plen - len(pi):] = torch.tensor(pi)
        r[i, :len(ri)] = torch.tensor(ri)
        mask[i, plen - len(pi):plen] = 1
        mask[i, plen:plen + len(ri)] = 1
    return {"prompts": p, "responses": r, "attention_mask": mask,
            "data_source": np.array([x["data_source"] for x in rows], dtype=object),
            "reward_model": np.array([x["reward_model"] for x in rows], dtype=object),
            "extra_info": np.array([x["extra_info"] for x in rows], dtype=object)}


def test_compute_score_through_the_module_path(tiny_processor_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_processor_dir)
    table = pa.Table.from_pylist([
        {"data_source": "curate", "reward_model": {"style": "rule", "ground_truth": gt},
         "extra_info": {"index": i, "answer_type": info.get("answer_type")}} for i, (gt, info, _) in enumerate(ITEMS)])
    pq.write_table(table, tmp_path / "train.parquet")
    compute_score = _load(adapter.__file__, "compute_score")
    reward, extra = _naive_manager(_batch(tokenizer, tmp_path / "train.parquet"), tokenizer, compute_score)

    want = [score({"answer": gt["answer"], "answer_type": gt["answer_type"] or info["answer_type"],
                   "prompt_type": gt["prompt_type"]}, text) for gt, info, text in ITEMS]
    assert reward.sum(dim=1).tolist() == pytest.approx([w.reward for w in want])
    assert [w.accuracy for w in want] == [1.0, 0.0, 1.0, 1.0, 1.0]
    assert extra["acc"] == [w.accuracy for w in want]
    assert extra["format"] == [w.format for w in want]
    assert sorted(extra) == ["acc", "format", "score"]
    assert (reward != 0).sum().item() == 4  # one reward per response, at its last token


def test_ground_truth_forms_and_float_mode() -> None:
    record = {"answer": "7", "answer_type": "number"}
    text = "<answer>7.0</answer>"
    want = score(record, text).reward
    import json

    assert adapter.compute_score("s", text, record)["score"] == want == 1.0
    assert adapter.compute_score("s", text, json.dumps(record))["score"] == want
    assert adapter.compute_score("s", text, "7", {"answer_type": "number"})["score"] == want
    assert adapter.compute_score("s", text, "7", None, answer_type="number", return_dict=False) == want
    assert adapter.compute_score("s", "<answer>6</answer>", "7", None, answer_type="number", return_dict=False) == 0.0
    # no answer type anywhere: scored 0 (and warned), never raised into the trainer
    assert adapter.compute_score("s", text, "7") == {"score": 0.0, "acc": 0.0, "format": 0.0}
    batch = adapter.compute_score_batch(["s", "s"], [text, "<answer>8</answer>"], [record, record], [None, None])
    assert [b["acc"] for b in batch] == [1.0, 0.0]
