"""curate rl-filter: pipeline overhead around generation, and end-to-end vs a bare loop.

1. Rollouts backend: 100,000 stored answers (6,250 prompts x 16, the generated RL
   set's prompts repeated with new ids, answers right or wrong at random): wall time
   of the whole command (sharding, scoring, journaling, selection, outputs) and the
   scoring-only time of the same pairs through ``curate.rewards.registry.score_many``.
2. Distinct math answers (16 per prompt): ``score_many`` once per prompt, as rl-filter
   scored before issue 14, against one call per shard, as it scores now (ratio).
3. Transformers backend with the tiny offline Qwen2-VL: ``rl_filter`` vs a bare loop
   that calls the same backend (same prompts, n, sampling) and scores with
   ``score_many``, nothing else. Ratio = bare / rl-filter (target >= 0.9).

    .venv/bin/python benchmarks/bench_rl_filter.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from curate.rl.config import RlFilterConfig
from curate.fixtures.sampledata import make_sample_data  # noqa: E402
from curate.fixtures.tiny_vlm import build_tiny_vlm  # noqa: E402
from curate.generate import make_backend  # noqa: E402
from curate.core.records import read_records  # noqa: E402
from curate.rewards.registry import score_many  # noqa: E402
from curate.rewards.runtime.limits import warm_up  # noqa: E402
from curate.rl.filter import RolloutTask, rl_filter  # noqa: E402


def rollouts_case(tmp: Path, sample: Path, prompts_n: int, n: int) -> None:
    base = [json.loads(l) for l in (sample / "rl" / "prompts.jsonl").read_text().splitlines()]
    rng = random.Random(0)
    src, answers = tmp / "prompts.jsonl", tmp / "answers.jsonl"
    with open(src, "w") as fp, open(answers, "w") as fa:
        for i in range(prompts_n):
            p = dict(base[i % len(base)])
            images = p.pop("images", None) or [p.pop("image")]
            p["images"] = [str(sample / "rl" / im) for im in images]
            p["id"] = f"{p['id']}~{i}"
            fp.write(json.dumps(p) + "\n")
            for _ in range(n):
                text = p["answer"] if rng.random() < 0.4 else "42"
                fa.write(json.dumps({"id": p["id"], "response": f"<answer>{text}</answer>"}) + "\n")
    warm_up(wait=True)
    t0 = time.perf_counter()
    stats = rl_filter([str(src)], RlFilterConfig(out=tmp / "out", backend={"rollouts": str(answers)}, n=n,
                                                 shard_size=1000, plot=True))
    whole = time.perf_counter() - t0
    records = {r["id"]: r for r in read_records([src])}
    pairs = []
    for line in answers.read_text().splitlines():
        row = json.loads(line)
        pairs.append((records[row["id"]], row["response"]))
    t0 = time.perf_counter()
    for k in range(0, len(pairs), 1000 * n):  # as rl-filter scores: one call per shard of 1,000 prompts
        score_many(pairs[k:k + 1000 * n])
    scoring = time.perf_counter() - t0
    total = prompts_n * n
    print(f"rollouts backend: {total:,} rollouts of {prompts_n:,} prompts in {whole:.1f}s "
          f"({total / whole:,.0f} rollouts/s); kept {stats['kept']:,}")
    print(f"  scoring alone (score_many per shard): {scoring:.1f}s; pipeline overhead {whole - scoring:.1f}s "
          f"({(whole - scoring) / whole:.0%} of the run)")


def batching_case(prompts_n: int, n: int) -> None:
    """Distinct math answers: score_many per prompt (rl-filter before issue 14) vs one call per shard (now)."""
    def pairs(offset: int) -> list[tuple[dict, str]]:
        out = []
        for i in range(offset, offset + prompts_n):
            gold = f"\\frac{{{i % 89 + 2}}}{{{i // 89 + 3}}} + {i}"
            rec = {"id": f"m{i}", "answer": gold, "answer_type": "math", "source": "bench"}
            out += [(rec, f"<answer>{gold if j % 3 == 0 else f'{gold} + {j}'}</answer>") for j in range(n)]
        return out

    warm_up(wait=True)
    per_prompt, per_shard = pairs(0), pairs(10 * prompts_n)  # disjoint: no cache hit from one side to the other
    t0 = time.perf_counter()
    for k in range(0, len(per_prompt), n):
        score_many(per_prompt[k:k + n])
    one_by_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    score_many(per_shard)
    batched = time.perf_counter() - t0
    total = prompts_n * n
    print(f"math scoring, {prompts_n:,} prompts x {n} distinct answers: per prompt {total / one_by_one:,.0f} answers/s, "
          f"one call per shard {total / batched:,.0f}/s ({one_by_one / batched:.2f}x); load {os.getloadavg()[0]:.1f}")


def transformers_case(tmp: Path, sample: Path, prompts_n: int, n: int) -> None:
    model = build_tiny_vlm(tmp / "vlm")
    base = [json.loads(l) for l in (sample / "rl" / "prompts.jsonl").read_text().splitlines()][:prompts_n]
    src = tmp / "tprompts.jsonl"
    with open(src, "w") as fp:
        for p in base:
            images = p.pop("images", None) or [p.pop("image")]
            fp.write(json.dumps({**p, "images": [str(sample / "rl" / im) for im in images]}) + "\n")
    sampling = {"max_new_tokens": 24, "temperature": 1.0, "seed": 0}
    backend_args = {"model": str(model), "device": "cpu"}
    task = RolloutTask(RlFilterConfig(out=tmp / "task", backend=backend_args, n=n, **sampling))
    requests = [task.request(r) for r in read_records([src])]
    records = {r["id"]: r for r in read_records([src])}
    warm_up(wait=True)
    make_backend(**backend_args).generate(requests[:2])  # warm the file cache and the libraries
    times_bare, times_ours = [], []
    for round_ in range(2):
        t0 = time.perf_counter()
        with make_backend(**backend_args) as backend:  # both sides load the model once
            for res in backend.generate(requests):
                score_many([(records[res.key], t) for t in res.responses])
        times_bare.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rl_filter([str(src)], RlFilterConfig(out=tmp / f"t{round_}", backend=backend_args, n=n, **sampling, plot=False))
        times_ours.append(time.perf_counter() - t0)
    bare, ours = min(times_bare), min(times_ours)
    print(f"transformers backend (tiny Qwen2-VL, {len(requests)} prompts x {n}, 24 new tokens), best of 2:")
    print(f"  bare loop {bare:.1f}s, curate rl-filter {ours:.1f}s (both load the model), ratio {bare / ours:.2f}  "
          "[target >= 0.9]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sample = tmp / "sample"
        make_sample_data(sample)
        rollouts_case(tmp, sample, 625 if args.quick else 6250, 16)
        batching_case(40 if args.quick else 150, 16)
        transformers_case(tmp, sample, 16 if args.quick else 48, 4)


if __name__ == "__main__":
    main()
