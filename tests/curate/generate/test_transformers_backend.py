"""The transformers backend on the tiny offline Qwen2-VL (random weights: answers are noise).

The tiny model emits <|im_end|> with about 5 % probability per step, so both
answers that end by themselves and answers cut at max_new_tokens occur.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from curate.generate.base import GenerationRequest, SamplingParams
from curate.generate import make_backend
from curate.generate.transformers_backend import TransformersBackend


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> None:
    """One torch thread while this module runs: the tiny model's ops are far too small to split
    (on a busy 2-core machine two threads make them about ten times slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def backend(tiny_vlm_dir: Path) -> TransformersBackend:
    with make_backend(model=str(tiny_vlm_dir), device="cpu", dtype="float32", batch_size=3) as be:
        yield be


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("gen-images")
    rng = np.random.default_rng(0)
    out = {}
    for name, size in (("noise1.png", (64, 80)), ("noise2.png", (64, 80)), ("wide.jpg", (40, 150))):
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(folder / name)
        out[name] = str(folder / name)
    data = (folder / "noise1.png").read_bytes()
    (folder / "cut.png").write_bytes(data[: len(data) // 2])
    out["cut.png"] = str(folder / "cut.png")
    return out


def _req(key: str, images: list[str], n: int, sampling: SamplingParams, text: str = "What is shown?") -> GenerationRequest:
    prompt = "<image>" * len(images) + "\n" + text
    return GenerationRequest(key=key, messages=[{"role": "user", "content": prompt}], images=images, n=n,
                             sampling=sampling)


def test_n_samples_per_prompt(backend: TransformersBackend, images: dict[str, str]) -> None:
    sp = SamplingParams(max_new_tokens=12, seed=0)
    reqs = [_req(f"r{i}", [images["noise1.png"]] if i % 2 else [images["wide.jpg"]], n=4, sampling=sp)
            for i in range(4)]
    reqs.append(GenerationRequest(key="text-only", messages=[{"role": "user", "content": "Say hi."}], n=2,
                                  sampling=sp))
    results = backend.generate(reqs)
    assert [r.key for r in results] == [r.key for r in reqs]
    for req, res in zip(reqs, results):
        assert res.error is None, res.detail
        assert len(res.responses) == len(res.truncated) == req.n
        assert all(isinstance(t, str) for t in res.responses)
        assert all(isinstance(t, bool) for t in res.truncated)
        assert len(set(res.responses)) > 1  # independent samples, not one answer repeated
        assert res.attempts == 1 and res.retries == 0


def test_images_reach_the_model(backend: TransformersBackend, images: dict[str, str]) -> None:
    sp = SamplingParams(max_new_tokens=16, seed=5)
    # Same key, seed and text: the random streams are identical, only the image differs.
    a, b, a_again = backend.generate([_req("same", [images["noise1.png"]], 4, sp),
                                      _req("same", [images["noise2.png"]], 4, sp),
                                      _req("same", [images["noise1.png"]], 4, sp)])
    assert a.responses == a_again.responses
    assert a.responses != b.responses

    # The prompt the backend builds carries the image: its processor output has pixels and image tokens.
    text, decoded = backend._prepare(_req("x", [images["wide.jpg"]], 1, sp))
    inputs = backend.processor(text=[text], images=decoded, return_tensors="pt")
    image_id = backend.model.config.image_token_id
    grid = inputs["image_grid_thw"][0].tolist()
    assert inputs["pixel_values"].shape[0] == grid[0] * grid[1] * grid[2] > 0
    assert int((inputs["input_ids"] == image_id).sum()) == grid[0] * grid[1] * grid[2] // 4


def test_truncation_is_flagged(backend: TransformersBackend) -> None:
    msgs = [{"role": "user", "content": "Tell me a long story."}]
    short = backend.generate([GenerationRequest("t", msgs, n=12, sampling=SamplingParams(max_new_tokens=1, seed=2))])[0]
    long = backend.generate([GenerationRequest("t", msgs, n=12, sampling=SamplingParams(max_new_tokens=120, seed=2))])[0]
    # One token: the answer is cut unless that token was the end of turn (then it is empty).
    assert short.truncated == [r != "" for r in short.responses]
    assert sum(short.truncated) >= 9
    # The same streams with room to finish: most answers end by themselves (p(stop) ≈ 5 % per token).
    assert sum(long.truncated) <= 2 and sum(not t for t in long.truncated) >= 10
    for s, full in zip(short.responses, long.responses):  # same per-sample seeds: the short answer is a prefix
        if "\ufffd" not in s:
            assert full.startswith(s)


def test_answers_do_not_depend_on_the_batch(tiny_vlm_dir: Path,
                                            images: dict[str, str]) -> None:
    """Each answer's random stream is its own: batch of 3 (padded) == one by one, in reverse order.

    In float64: in float32 the other kernels of a batch of another shape move the logits by
    about 3e-6, which flips a draw in roughly one seed of three on this tiny model (see the
    backend's module docstring), so float32 equality depends on the machine's kernels.
    """
    sp = SamplingParams(max_new_tokens=10, seed=1, temperature=0.8, top_p=0.9)
    reqs = [_req(f"k{i}", [images[name]], 3, sp) for i, name in enumerate(["noise1.png", "wide.jpg", "noise2.png"])]
    with make_backend(model=str(tiny_vlm_dir), device="cpu", dtype="float64", batch_size=3) as batched_backend:
        batched = batched_backend.generate(reqs)
        other_seed = batched_backend.generate([_req("k0", [images["noise1.png"]], 3, SamplingParams(
            max_new_tokens=10, seed=2, temperature=0.8, top_p=0.9))])
    with make_backend(model=str(tiny_vlm_dir), device="cpu", dtype="float64", batch_size=1) as alone:
        single = alone.generate(reqs[::-1])[::-1]
    assert all(r.ok for r in batched)
    assert [r.responses for r in batched] == [r.responses for r in single]
    assert other_seed[0].responses != batched[0].responses


def test_greedy_gives_identical_samples(backend: TransformersBackend, images: dict[str, str]) -> None:
    res = backend.generate([_req("g", [images["wide.jpg"]], 3, SamplingParams(max_new_tokens=8, temperature=0.0))])[0]
    assert res.error is None and len(set(res.responses)) == 1


def test_bad_requests_are_reported_and_do_not_stop_the_batch(backend: TransformersBackend,
                                                             images: dict[str, str]) -> None:
    sp = SamplingParams(max_new_tokens=4)
    reqs = [
        _req("ok1", [images["noise1.png"]], 2, sp),
        _req("cut", [images["cut.png"]], 2, sp),
        _req("missing", ["/nonexistent/x.png"], 2, sp),
        GenerationRequest("mismatch", [{"role": "user", "content": "<image><image>"}], [images["wide.jpg"]], 2, sp),
        _req("ok2", [images["wide.jpg"]], 2, sp),
    ]
    before = backend.stats.as_dict()["errors"]
    res = {r.key: r for r in backend.generate(reqs)}
    assert res["ok1"].ok and res["ok2"].ok and len(res["ok2"].responses) == 2
    assert res["cut"].error == "truncated"
    assert res["missing"].error == "missing_image"
    assert res["mismatch"].error == "prompt_error:image_count"
    assert all(not r.responses for k, r in res.items() if not k.startswith("ok"))
    assert backend.stats.as_dict()["errors"] - before == 3
