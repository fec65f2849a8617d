"""TRL: a real GRPOTrainer runs two steps on CPU with curate's reward functions."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest

from curate.rewards.registry import score
from curate.rewards.trainers import trl as curate_trl

trl = pytest.importorskip("trl", reason="trl is not installed (pip install 'curate[trl]')")
datasets = pytest.importorskip("datasets", reason="datasets is not installed (pip install 'curate[trl]')")

FAVOUR = {"<answer>": .12, "</answer>": .12, "7": .14, "5": .14, " ": .1, "<|im_end|>": .08}
ROWS = [
    {"id": "a", "q": "How many red squares?", "answer": "7", "answer_type": "number", "prompt_type": "normal"},
    {"id": "b", "q": "How many blue circles?", "answer": "5", "answer_type": "number", "prompt_type": "normal"},
    {"id": "c", "q": "Which option, A or B?", "answer": ["B", "b"], "answer_type": "multiple-choice",
     "prompt_type": "normal", "reward": {"accuracy_ratio": 0.8, "format_ratio": 0.2}},
    {"id": "d", "q": "How many? Think first.", "answer": "57", "answer_type": "number", "prompt_type": "think"},
]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from curate.fixtures.tiny_lm import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("tiny-lm"), seed=0, favour=FAVOUR)


def _dataset():
    rows = [{"prompt": [{"role": "user", "content": f"[{r['id']}] {r['q']}"}],
             **{k: v for k, v in r.items() if k != "q"}} for r in ROWS]
    features = datasets.Features({
        "prompt": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
        "id": datasets.Value("string"), "answer": datasets.Json(), "answer_type": datasets.Value("string"),
        "prompt_type": datasets.Value("string"), "reward": datasets.Json()})
    # datasets.Json keeps a str as JSON text: encode the values (as kept_dataset does)
    rows = [{**r, "answer": json.dumps(r["answer"]), "reward": json.dumps(r.get("reward"))} for r in rows]
    return datasets.Dataset.from_list(rows, features=features)


def test_grpo_two_steps_logs_curate_scores(tiny_lm: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_lm)
    model = AutoModelForCausalLM.from_pretrained(tiny_lm)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
        max_steps=2, learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True, log_completions=True,
        save_strategy="no", seed=0, bf16=False, disable_tqdm=True, dataloader_num_workers=0, beta=0.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=_dataset(),
                              reward_funcs=[curate_trl.accuracy_reward, curate_trl.format_reward,
                                            curate_trl.curate_reward])
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters()), "no optimisation step happened"

    import pandas as pd

    files = sorted(glob.glob(str(tmp_path / "out" / "completions" / "completions_*.parquet")))
    assert len(files) == 2
    table = pd.concat([pd.read_parquet(f) for f in files])
    assert len(table) == 16
    by_id = {r["id"]: r for r in ROWS}
    seen = {"accuracy": set(), "format": set()}
    for _, row in table.iterrows():
        prompt = row["prompt"][-1]["content"]
        record = by_id[prompt[1:prompt.index("]")]]
        completion = row["completion"][-1]["content"]
        text = completion if isinstance(completion, str) else "".join(p["text"] for p in completion)
        want = score(record, text)
        assert row["accuracy_reward"] == pytest.approx(want.accuracy), text
        assert row["format_reward"] == pytest.approx(want.format), text
        assert row["curate_reward"] == pytest.approx(want.reward), text
        seen["accuracy"].add(want.accuracy)
        seen["format"].add(want.format)
    assert seen["accuracy"] == {0.0, 1.0}, "the tiny model's answers should be sometimes right, sometimes wrong"
    logged = [h for h in trainer.state.log_history if "rewards/accuracy_reward/mean" in h]
    assert len(logged) == 2


def test_conversational_and_plain_completions_score_the_same() -> None:
    texts = ["<answer>7</answer>", "<think>count them</think><answer>5</answer>", "7 or 5", ""]
    cols = {"answer": ["7", "5", "5", "7"], "answer_type": ["number"] * 4, "prompt_type": ["normal", "think", None, None]}
    plain = curate_trl.accuracy_reward(prompts=["p"] * 4, completions=texts, **cols)
    conv = curate_trl.accuracy_reward(prompts=[[{"role": "user", "content": "p"}]] * 4,
                                      completions=[[{"role": "assistant", "content": [{"type": "text", "text": t}]}]
                                                   for t in texts], **cols)
    records = [{"answer": a, "answer_type": "number", "prompt_type": p} for a, p in zip(cols["answer"], cols["prompt_type"])]
    assert plain == conv == [score(r, t).accuracy for r, t in zip(records, texts)]
    fmt = curate_trl.format_reward(prompts=["p"] * 4, completions=texts, **cols)
    assert fmt == [score(r, t).format for r, t in zip(records, texts)]


def test_grpo_vlm_on_kept_dataset_with_images(tiny_vlm_dir: Path, tmp_path: Path) -> None:
    """kept_dataset's prompts and image bytes go through TRL's vision path (tiny Qwen2-VL)."""
    import pandas as pd
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    (tmp_path / "images").mkdir()
    rows = []
    for i in range(2):
        Image.new("RGB", (56 + 28 * i, 56), (200, 30, 30)).save(tmp_path / "images" / f"{i}.png")
        rows.append({"id": f"v{i}", "problem": f"<image>\nHow many red squares? [{i}]", "answer": str(i + 1),
                     "answer_type": "number", "prompt_type": "normal", "images": [f"images/{i}.png"]})
    (tmp_path / "kept.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dataset = curate_trl.kept_dataset(tmp_path / "kept.jsonl")
    torch.manual_seed(0)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4, max_completion_length=6,
        max_steps=2, learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True, log_completions=True,
        save_strategy="no", seed=0, bf16=False, disable_tqdm=True, beta=0.0)
    trainer = trl.GRPOTrainer(model=AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir),
                              processing_class=AutoProcessor.from_pretrained(tiny_vlm_dir), args=args,
                              train_dataset=dataset, reward_funcs=[curate_trl.accuracy_reward])
    trainer.train()
    assert trainer.state.global_step == 2
    table = pd.concat([pd.read_parquet(f) for f in sorted((tmp_path / "out" / "completions").glob("*.parquet"))])
    assert len(table) == 8
    for _, row in table.iterrows():
        prompt = "".join(p["text"] or "" for p in row["prompt"][0]["content"] if p["type"] == "text")
        record = rows[int(prompt[prompt.index("[") + 1])]
        text = row["completion"][-1]["content"]
        text = text if isinstance(text, str) else "".join(p["text"] for p in text)
        assert row["accuracy_reward"] == score(record, text).accuracy
