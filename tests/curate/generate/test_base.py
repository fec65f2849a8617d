"""The backend interface: requests, seeds, prompt parts, stats and the factory."""

from __future__ import annotations

import pytest

from curate.core.errors import UserError
from curate.generate.base import GenerationRequest, GenerationResult, SamplingParams, derive_seed, summarize
from curate.generate import make_backend
from curate.generate.base import GenerationStats, PromptError, content_parts


def _image(i: int) -> dict:
    return {"type": "image", "n": i}


def test_sampling_params_and_requests_reject_impossible_values() -> None:
    for bad in ({"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"max_new_tokens": 0}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    with pytest.raises(ValueError, match="n must be"):
        GenerationRequest(key="a", messages=[{"role": "user", "content": "hi"}], n=0)


def test_derive_seed_is_stable_and_separates_its_inputs() -> None:
    a = derive_seed(0, "rec-1", 0)
    assert a == derive_seed(0, "rec-1", 0)
    others = {derive_seed(1, "rec-1", 0), derive_seed(0, "rec-2", 0), derive_seed(0, "rec-1", 1),
              derive_seed(0, "rec-1", "0", 0), derive_seed(0, "rec-10")}
    assert a not in others and len(others) == 5
    assert 0 <= derive_seed(7, "x", bits=31) < 2**31
    seeds = [derive_seed(3, f"k{i}") for i in range(2000)]
    assert len(set(seeds)) == 2000 and 0 <= min(seeds) and max(seeds) < 2**63


def test_content_parts_follow_the_placeholders() -> None:
    req = GenerationRequest(key="a", images=["/x/1.png", "/x/2.png"], messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Compare <image> and\n<image>: which is red?"},
    ])
    parts = content_parts(req, _image)
    assert parts[0] == {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    assert parts[1]["content"] == [{"type": "text", "text": "Compare "}, {"type": "image", "n": 0},
                                   {"type": "text", "text": " and\n"}, {"type": "image", "n": 1},
                                   {"type": "text", "text": ": which is red?"}]


def test_images_without_placeholders_go_first_in_the_first_user_turn() -> None:
    req = GenerationRequest(key="a", images=["/x/1.png"], messages=[{"role": "user", "content": "What is it?"}])
    assert content_parts(req, _image)[0]["content"] == [{"type": "image", "n": 0},
                                                         {"type": "text", "text": "What is it?"}]


@pytest.mark.parametrize(("messages", "images", "reason"), [
    ([], [], "prompt_error:empty"),
    ([{"role": "robot", "content": "hi"}], [], "prompt_error:role"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], [], "prompt_error:ends_with_assistant"),
    ([{"role": "user", "content": "<image> <image>"}], ["/a.png"], "prompt_error:image_count"),
    ([{"role": "user", "content": "<image>"}], [], "prompt_error:image_count"),
])
def test_unusable_prompts_have_a_reason(messages: list, images: list, reason: str) -> None:
    with pytest.raises(PromptError) as info:
        content_parts(GenerationRequest(key="a", messages=messages, images=images), _image)
    assert info.value.reason == reason


def test_stats_count_by_reason_and_reset() -> None:
    results = [
        GenerationResult("a", ["x", "y"], [True, False], attempts=3, retries=2,
                         retry_reasons=["http_error:503", "timeout"]),
        GenerationResult("b", [], [], error="timeout", attempts=2, retries=1, retry_reasons=["timeout"]),
        GenerationResult("c", ["z"], [False], attempts=1),
    ]
    flat = summarize(results)
    assert flat == {"attempts": 6, "errors": 1, "errors.timeout": 1, "requests": 3, "responses": 3,
                    "retries": 3, "retries.http_error:503": 1, "retries.timeout": 2, "truncated": 1}
    stats = GenerationStats()
    for r in results:
        stats.add(r)
    first = stats.reset()
    assert {k: v for k, v in first.items() if k != "seconds"} == flat
    assert stats.as_dict()["requests"] == 0


def test_make_backend_needs_exactly_one_source(tmp_path) -> None:
    with pytest.raises(UserError, match="exactly one"):
        make_backend()
    with pytest.raises(UserError, match="model and endpoint"):
        make_backend(model=str(tmp_path), endpoint="http://127.0.0.1:9")
    with pytest.raises(UserError, match="served_model goes with endpoint"):
        make_backend(model=str(tmp_path), served_model="m")
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text('{"id": "a", "response": "1"}\n')
    with pytest.raises(UserError, match="device cannot be used with rollouts"):
        make_backend(rollouts=str(rollouts), device="cpu")
    # unset (None) options are ignored, so CLI flags can be passed as they are
    backend = make_backend(rollouts=str(rollouts), device=None, concurrency=None)
    assert backend.name == "rollouts"


def test_missing_checkpoint_is_a_user_error(tmp_path) -> None:
    with pytest.raises(UserError, match="no such checkpoint folder"):
        make_backend(model=str(tmp_path / "nope"))
    with pytest.raises(UserError, match="config.json missing"):
        make_backend(model=str(tmp_path))
    with pytest.raises(UserError, match="http"):
        make_backend(endpoint="localhost:8000")
