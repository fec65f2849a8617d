"""open_clip model loading: specs, local files, precision, offline errors, fast text encoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from curate.models.encoders import DEFAULT_MODEL, load_encoder
from curate.models.specs import cached_hub_file, check_precision, parse_model_spec, pick_device
from curate.core.errors import UserError
from curate.fixtures.tiny_clip import tiny_clip_info
from curate.core.images import decode


@pytest.mark.parametrize("spec, kind, arch, source", [
    ("ViT-B-32-quickgelu:metaclip_400m", "tag", "ViT-B-32-quickgelu", "metaclip_400m"),
    ("ViT-B-32:/ckpt/b32.pt", "file", "ViT-B-32", "/ckpt/b32.pt"),
    ("ViT-B-32:weights.safetensors", "file", "ViT-B-32", "weights.safetensors"),
    ("local-dir:/models/clip", "local-dir", None, "/models/clip"),
    ("hf-hub:timm/vit_base_patch32_clip_224.metaclip_400m", "hf-hub", None,
     "timm/vit_base_patch32_clip_224.metaclip_400m"),
    ("ViT-B-32:random", "random", "ViT-B-32", None),
])
def test_parse_model_spec(spec: str, kind: str, arch: str | None, source: str | None) -> None:
    parsed = parse_model_spec(spec)
    assert (parsed.kind, parsed.arch, parsed.source) == (kind, arch, source)


@pytest.mark.parametrize("spec", ["", "ViT-B-32", "local-dir:", ":metaclip_400m"])
def test_parse_model_spec_rejects_incomplete(spec: str) -> None:
    with pytest.raises(UserError):
        parse_model_spec(spec)


def test_default_is_metaclip_b32() -> None:
    assert DEFAULT_MODEL == "ViT-B-32-quickgelu:metaclip_400m"


def test_local_dir_and_checkpoint_file_load_the_same_model(tiny_clip_spec: str, sample_data) -> None:
    info = tiny_clip_info(tiny_clip_spec)
    a = load_encoder(tiny_clip_spec, cache=False)
    # ARCH is not an open_clip name: its config is found beside the checkpoint and registered.
    b = load_encoder(f"{info.arch}:{info.checkpoint}", cache=False)
    assert a.fingerprint == b.fingerprint
    assert a.dim == b.dim == 64
    pixels = a.preprocess(decode(sample_data / "images" / "chelsea.jpg")).unsqueeze(0)
    ea, eb = a.encode_images(pixels), b.encode_images(pixels)
    np.testing.assert_array_equal(ea, eb)
    assert abs(float(np.linalg.norm(ea[0])) - 1.0) < 1e-5


def test_fingerprint_changes_with_weights_and_precision(tiny_clip_spec: str, tmp_path) -> None:
    from curate.fixtures.tiny_clip import build_tiny_clip

    other = build_tiny_clip(tmp_path / "other", seed=1)
    base = load_encoder(tiny_clip_spec)
    assert load_encoder(other).fingerprint != base.fingerprint
    assert load_encoder(tiny_clip_spec, precision="bf16").fingerprint != base.fingerprint


def test_cache_returns_same_instance(tiny_clip_spec: str) -> None:
    assert load_encoder(tiny_clip_spec) is load_encoder(tiny_clip_spec)


def test_bf16_runs_on_cpu_and_is_close_to_fp32(tiny_clip_spec: str, sample_data) -> None:
    fp32 = load_encoder(tiny_clip_spec)
    bf16 = load_encoder(tiny_clip_spec, precision="bf16")
    pixels = fp32.preprocess(decode(sample_data / "images" / "coffee.jpg")).unsqueeze(0)
    cos = float((fp32.encode_images(pixels) * bf16.encode_images(pixels)).sum())
    assert cos > 0.98


def test_fp16_needs_a_gpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(UserError, match="fp16 needs a CUDA GPU"):
        check_precision("fp16", pick_device("auto"))


def test_cuda_device_without_gpu_is_a_user_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(UserError, match="no CUDA GPU"):
        pick_device("cuda")


def test_offline_hub_tag_is_a_one_line_error() -> None:
    repo = "timm/vit_base_patch32_clip_224.metaclip_400m"
    if cached_hub_file(repo, ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]):
        pytest.skip("MetaCLIP weights are in this machine's hub cache")
    with pytest.raises(UserError) as err:
        load_encoder(DEFAULT_MODEL, cache=False)
    message = str(err.value)
    assert "not reachable" in message and "HF_HUB_OFFLINE" in message and "local-dir:" in message and "\n" not in message


@pytest.mark.parametrize("spec, match", [
    ("ViT-B-32:not-a-tag", "unknown pretrained tag"),
    ("No-Such-Arch:metaclip_400m", "unknown architecture"),
    ("local-dir:/no/such/folder", "no such folder"),
    ("ViT-B-32:/no/such/file.pt", "no such checkpoint file"),
])
def test_bad_specs_are_user_errors(spec: str, match: str) -> None:
    with pytest.raises(UserError, match=match):
        load_encoder(spec, cache=False)


def test_unknown_arch_beside_checkpoint_is_a_user_error(tiny_clip_spec: str, tmp_path) -> None:
    info = tiny_clip_info(tiny_clip_spec)
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(info.checkpoint.read_bytes())
    with pytest.raises(UserError, match="unknown architecture"):
        load_encoder(f"mystery-arch:{ckpt}", cache=False)


def test_truncated_text_encoding_matches_full_forward(tiny_clip_spec: str) -> None:
    enc = load_encoder(tiny_clip_spec)
    assert enc.info["truncate_text"]
    texts = ["cat", "a photo of a golden retriever", "espresso", "hubble deep field", "x" * 40]
    tokens = enc.tokenize(texts)
    fast = enc.encode_tokens(tokens)
    with torch.inference_mode():
        full = torch.nn.functional.normalize(enc.model.encode_text(tokens).float(), dim=-1).numpy()
    np.testing.assert_allclose(fast, full, atol=2e-6)
    assert enc.scripts == ("latin",)  # CLIP's BPE tokenizer: English only


def test_image_embeddings_are_deterministic(tiny_clip_spec: str, sample_data) -> None:
    enc = load_encoder(tiny_clip_spec)
    pixels = torch.stack([enc.preprocess(decode(sample_data / "images" / n)) for n in ("rocket.jpg", "flower.jpg")])
    assert enc.encode_images(pixels).tobytes() == enc.encode_images(pixels.clone()).tobytes()


def test_batched_preprocessing_equals_open_clips(tiny_clip_spec: str, sample_data) -> None:
    enc = load_encoder(tiny_clip_spec)
    assert enc.info["split_preprocess"] is not None
    images = [decode(sample_data / "images" / n) for n in ("camera.jpg", "china_1600x200.jpg", "rocket_140x854.jpg")]
    want = torch.stack([enc.preprocess(im) for im in images])
    got = enc.to_pixels([enc.prepare_image(im) for im in images])
    assert torch.equal(want, got)
