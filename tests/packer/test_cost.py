"""The per-sample cost model: formulas against a hand count of every matrix product, YAML loading."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from curate.core.errors import UserError
from packer.cost import CostModel, image_patches, load_cost_model, sample_components, table_components, table_costs

TINY = CostModel(lm_hidden=8, lm_layers=2, lm_heads=2, lm_kv_heads=1, lm_head_dim=4, lm_intermediate=16,
                 lm_vocab=10, lm_gated_mlp=True, vit_hidden=6, vit_layers=3, vit_intermediate=12,
                 vit_gated_mlp=False, patch_size=2, temporal_patch_size=1, in_channels=3, merge_size=2,
                 training_factor=3.0)


def matmul(m: float, k: int, n: float) -> float:
    """FLOPs of an (m × k) · (k × n) product: one multiply and one add per term."""
    return 2.0 * m * k * n


def hand_count(model: CostModel, tokens: int, grids: list[tuple[int, int, int]], vit_heads: int = 3) -> float:
    """Training FLOPs of one sample, summed product by product as a forward pass would run them."""
    d, hd, q, kv = model.lm_hidden, model.lm_head_dim, model.lm_heads, model.lm_kv_heads
    total = 0.0
    for _ in range(model.lm_layers):
        total += matmul(tokens, d, q * hd) + 2 * matmul(tokens, d, kv * hd) + matmul(tokens, q * hd, d)
        total += 2 * matmul(tokens, d, model.lm_intermediate) + matmul(tokens, model.lm_intermediate, d)  # SwiGLU
        for _h in range(q):  # causal: half of the T×T scores are computed
            total += 0.5 * (matmul(tokens, hd, tokens) + matmul(tokens, tokens, hd))
    total += matmul(tokens, d, model.lm_vocab)  # LM head on every position
    big_d, s = model.vit_hidden, model.merge_size
    vhd = big_d // vit_heads
    for t, h, w in grids:
        p = t * h * w
        total += matmul(p, model.in_channels * model.patch_size ** 2 * model.temporal_patch_size, big_d)
        for _ in range(model.vit_layers):
            total += matmul(p, big_d, 3 * big_d) + matmul(p, big_d, big_d)  # qkv, out
            total += matmul(p, big_d, model.vit_intermediate) + matmul(p, model.vit_intermediate, big_d)
            for _h in range(vit_heads):  # full attention inside the image
                total += matmul(p, vhd, p) + matmul(p, p, vhd)
        merged = p / s ** 2
        total += matmul(merged, s * s * big_d, s * s * big_d) + matmul(merged, s * s * big_d, d)
    return model.training_factor * total


def test_formulas_equal_a_hand_count_of_every_product() -> None:
    samples = [(10, []), (37, [(1, 4, 4)]), (123, [(1, 4, 6), (1, 8, 2), (1, 2, 2)]), (1, [])]
    tokens = np.array([t for t, _ in samples])
    patches = np.array([t * h * w for _, g in samples for t, h, w in g])
    owner = np.array([i for i, (_, g) in enumerate(samples) for _ in g])
    got = TINY.sample_costs(tokens, patches, owner)
    want = [hand_count(TINY, t, g) for t, g in samples]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # a non-gated LM MLP has two matrices, not three
    plain = CostModel(**{**TINY.to_dict(), "lm_gated_mlp": False})
    diff = TINY.sample_costs(np.array([5]), patches[:0], owner[:0]) - plain.sample_costs(np.array([5]), patches[:0],
                                                                                          owner[:0])
    assert diff[0] == pytest.approx(3.0 * TINY.lm_layers * matmul(5, TINY.lm_hidden, TINY.lm_intermediate))


def test_default_model_prices_image_tokens_above_text_tokens() -> None:
    model = CostModel()
    a, b, c, e = model.coefficients()
    text = model.sample_costs(np.array([4096]), np.zeros(0), np.zeros(0))[0]
    # the same 4096 tokens as one document page of 4096 image tokens (16384 patches) plus no text
    page = model.sample_costs(np.array([4096]), np.array([16384]), np.array([0]))[0]
    captions = model.sample_costs(np.full(40, 4096 // 40), np.zeros(0), np.zeros(0)).sum()
    assert page > 1.4 * text > 1.4 * captions  # vision work, then attention, grows with one long sample
    assert text == pytest.approx(a * 4096 + b * 4096 ** 2)


def test_image_patches_from_a_grids_column() -> None:
    col = pa.array([[[1, 2, 4]], [], None, [[1, 6, 6], [2, 2, 2]]], pa.list_(pa.list_(pa.int32())))
    patches, owner = image_patches(col)
    assert patches.tolist() == [8, 36, 8] and owner.tolist() == [0, 3, 3]
    table = pa.table({"tokens": pa.array([5, 6, 7, 8], pa.int32()), "image_grids": col})
    np.testing.assert_allclose(table_costs(table, TINY), TINY.sample_costs(np.array([5, 6, 7, 8]), patches, owner))
    no_grids = table.drop_columns(["image_grids"])
    np.testing.assert_allclose(table_costs(no_grids, TINY),
                               TINY.sample_costs(np.array([5, 6, 7, 8]), np.zeros(0), np.zeros(0)))
    with pytest.raises(UserError, match="expected"):
        image_patches(pa.array([[[1, 2]]], pa.list_(pa.list_(pa.int32()))))


def test_cost_model_from_yaml(tmp_path) -> None:
    assert load_cost_model(None) == CostModel()
    path = tmp_path / "model.yaml"
    path.write_text("lm_hidden: 2048\nlm_layers: 28\nvit_gated_mlp: true\ntraining_factor: 4\n")
    model = load_cost_model(path)
    assert (model.lm_hidden, model.lm_layers, model.vit_gated_mlp, model.training_factor) == (2048, 28, True, 4)
    assert model.lm_heads == CostModel().lm_heads
    for text, match in [("lm_hiden: 3\n", "unknown field.*lm_hiden"), ("lm_layers: -1\n", "lm_layers must be >= 1"),
                        ("lm_layers: 2.5\n", "integer"), ("lm_gated_mlp: 1\n", "true or false"),
                        ("- 1\n", "mapping"), ("a: [\n", "not valid YAML")]:
        path.write_text(text)
        with pytest.raises(UserError, match=match) as err:
            load_cost_model(path)
        assert str(path) in str(err.value)
    with pytest.raises(UserError, match="cannot read"):
        load_cost_model(tmp_path / "missing.yaml")


def test_components_dotted_with_the_coefficients_are_the_costs() -> None:
    samples = [(10, []), (37, [(1, 4, 4)]), (123, [(1, 4, 6), (1, 8, 2), (1, 2, 2)]), (1, [])]
    tokens = np.array([t for t, _ in samples])
    patches = np.array([t * h * w for _, g in samples for t, h, w in g])
    owner = np.array([i for i, (_, g) in enumerate(samples) for _ in g])
    comps = sample_components(tokens, patches, owner)
    assert comps[:, 0].tolist() == tokens.tolist() and comps[:, 1].tolist() == (tokens ** 2).tolist()
    assert comps[2, 2] == 24 + 16 + 4 and comps[2, 3] == 24 ** 2 + 16 ** 2 + 4 ** 2 and comps[3, 2:].tolist() == [0, 0]
    np.testing.assert_allclose(comps @ np.array(TINY.coefficients()), TINY.sample_costs(tokens, patches, owner),
                               rtol=1e-12)
    table = pa.table({"tokens": pa.array(tokens, pa.int32()),
                      "image_grids": pa.array([[list(x) for x in g] for _, g in samples],
                                              pa.list_(pa.list_(pa.int32())))})
    np.testing.assert_array_equal(table_components(table), comps)


def test_given_coefficients_replace_the_flops_estimate(tmp_path) -> None:
    fitted = CostModel(per_token=2.0, per_token_sq=0.5, per_patch=3.0, per_patch_sq=0.25)
    assert fitted.fitted and not CostModel().fitted
    assert fitted.coefficients() == (2.0, 0.5, 3.0, 0.25)
    cost = fitted.sample_costs(np.array([4, 1]), np.array([2, 6]), np.array([0, 0]))
    assert cost.tolist() == [2 * 4 + 0.5 * 16 + 3 * 8 + 0.25 * (4 + 36), 2 + 0.5]
    assert CostModel(**fitted.to_dict()) == fitted  # what verify rebuilds from stats.json
    path = tmp_path / "fit.yaml"
    path.write_text("per_token: 1\nper_token_sq: 0\nper_patch: 2.5e-3\nper_patch_sq: 1e-7\n")
    assert load_cost_model(path).coefficients() == (1.0, 0.0, 2.5e-3, 1e-7)
    for text, match in [("per_token: 1\n", "all of per_token"), ("per_token: -1\nper_token_sq: 0\nper_patch: 0\n"
                                                                 "per_patch_sq: 0\n", "per_token must be a number >= 0")]:
        path.write_text(text)
        with pytest.raises(UserError, match=match):
            load_cost_model(path)
