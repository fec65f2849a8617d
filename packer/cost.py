"""A per-sample compute cost model: estimated training FLOPs of one sample.

A packed sequence is trained with variable-length attention, so attention stays
inside each sample (the language model) and inside each image (the vision
encoder, which encodes every image at its native resolution). The cost of a
sample with ``T`` tokens (text + image tokens) and images of ``P_j`` patches each
(patches *before* the ``merge × merge`` merge: ``P = t · h · w`` of the image's
grid) is, in forward FLOPs (2 per multiply-add)::

    LM linear      T · 2 · [L · (d · hd · (2·H + 2·K) + m · d · F) + d · V]
    LM attention   T² · 2 · L · H · hd                      (QKᵀ and A·V, causal: half of T²)
    ViT linear     P · 2 · [c · p² · tp · D + Lv · (4 · D² + mv · D · Fv)]
    ViT attention  P² · 4 · Lv · D                           (bidirectional, per image)
    merger         (P / s²) · 2 · [(s² · D)² + s² · D · d]   (MLP from s²·D to s²·D to d)

with ``d, L, H, K, hd, F, V`` the language model's hidden size, layers, attention
heads, key/value heads, head size, MLP size and vocabulary (the LM head is
applied to every token); ``m`` = 3 for a gated (SwiGLU) MLP, 2 otherwise;
``D, Lv, Fv, mv`` the same for the vision encoder; ``p, tp, c`` its patch size,
temporal patch size and input channels; ``s`` the spatial merge size. The
sample's cost is ``training_factor`` (3: forward + backward) times the sum.
Norms, rotary embeddings, softmax and the loss are left out (a few percent,
nearly linear in tokens).

So ``cost = a·T + b·T² + Σ_images (c·P + e·P²)`` with the coefficients of
:meth:`CostModel.coefficients`: a sample's cost is the dot product of its four
*components* (:data:`COMPONENTS`: ``T``, ``T²``, ``ΣP``, ``ΣP²``, from
:func:`sample_components`) with ``(a, b, c, e)``, and so is a packed sequence's
(its samples' components summed). The defaults describe LLaVA-OneVision-1.5-8B: a
Qwen3-8B language model (hidden 4096, 36 layers, 32 heads, 8 key/value heads of
128, MLP 12288, vocabulary 151936) and a RICE-ViT-L/14 encoder (hidden 1024,
24 layers, 16 heads, MLP 4096, GELU, patch 14, 2×2 merge). Other architectures
come from a YAML file of the same field names (``curate pack --cost-model FILE``);
the four coefficients can also be given directly (``per_token``, ``per_token_sq``,
``per_patch``, ``per_patch_sq``: a model fitted to measured step times, see
:mod:`packer.timing`), and then replace the FLOPs estimate.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.core.errors import UserError
from curate.core.io import open_input
from curate.core.validate import integer

COMPONENTS = ("tokens", "tokens_sq", "patches", "patches_sq")
"""The cost components of a sample (or a sum of samples): ``ΣT``, ``ΣT²``, ``ΣP`` and ``ΣP²``."""

COEFFICIENT_FIELDS = ("per_token", "per_token_sq", "per_patch", "per_patch_sq")
""":class:`CostModel` fields that give the coefficients of :data:`COMPONENTS` directly."""

@dataclass(frozen=True)
class CostModel:
    """Architecture parameters of the cost model (defaults: LLaVA-OneVision-1.5-8B).

    Attributes:
        lm_hidden: Language model hidden size ``d``.
        lm_layers: Language model layers ``L``.
        lm_heads: Attention (query) heads ``H``.
        lm_kv_heads: Key/value heads ``K`` (grouped-query attention).
        lm_head_dim: Size of one attention head ``hd``.
        lm_intermediate: MLP size ``F``.
        lm_vocab: Vocabulary size ``V`` (LM head); 0 leaves the head out.
        lm_gated_mlp: SwiGLU MLP (3 matrices) instead of 2.
        vit_hidden: Vision encoder hidden size ``D``.
        vit_layers: Vision encoder layers ``Lv``.
        vit_intermediate: Vision encoder MLP size ``Fv``.
        vit_gated_mlp: Gated vision MLP (3 matrices) instead of 2.
        patch_size: Patch side ``p`` in pixels.
        temporal_patch_size: Frames per patch ``tp``.
        in_channels: Image channels ``c``.
        merge_size: Spatial merge ``s`` (image tokens = patches / s²).
        training_factor: Multiplier from forward to training FLOPs.
        per_token, per_token_sq, per_patch, per_patch_sq: The coefficients ``(a, b, c, e)``
            themselves (all four or none), e.g. fitted to measured step times; when
            given they replace the FLOPs estimate of the fields above (cost is then in
            their unit, seconds for a fit).
    """

    lm_hidden: int = 4096
    lm_layers: int = 36
    lm_heads: int = 32
    lm_kv_heads: int = 8
    lm_head_dim: int = 128
    lm_intermediate: int = 12288
    lm_vocab: int = 151936
    lm_gated_mlp: bool = True
    vit_hidden: int = 1024
    vit_layers: int = 24
    vit_intermediate: int = 4096
    vit_gated_mlp: bool = False
    patch_size: int = 14
    temporal_patch_size: int = 1
    in_channels: int = 3
    merge_size: int = 2
    training_factor: float = 3.0
    per_token: float | None = None
    per_token_sq: float | None = None
    per_patch: float | None = None
    per_patch_sq: float | None = None

    def __post_init__(self) -> None:
        given = [getattr(self, name) is not None for name in COEFFICIENT_FIELDS]
        if any(given) and not all(given):
            raise UserError(f"cost model: give all of {', '.join(COEFFICIENT_FIELDS)} or none")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in COEFFICIENT_FIELDS:
                if value is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
                        or value == float("inf"):
                    raise UserError(f"cost model: {f.name} must be a number >= 0, got {value!r}")
                continue
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise UserError(f"cost model: {f.name} must be true or false, got {value!r}")
                continue
            minimum = 0 if f.name in ("lm_vocab", "vit_layers") else 1
            if f.type in ("int", int) and value is not None:
                integer(f"cost model: {f.name}", value, minimum)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"cost model: {f.name} must be a number, got {value!r}")
            if value < minimum:
                raise UserError(f"cost model: {f.name} must be >= {minimum}, got {value!r}")

    def coefficients(self) -> tuple[float, float, float, float]:
        """``(a, b, c, e)`` of ``cost = a·T + b·T² + Σ_images (c·P + e·P²)``: training FLOPs, or the given ones."""
        if self.per_token is not None:
            return tuple(float(getattr(self, name)) for name in COEFFICIENT_FIELDS)  # type: ignore[return-value]
        d, hd = self.lm_hidden, self.lm_head_dim
        m = 3 if self.lm_gated_mlp else 2
        lm_layer = d * hd * (2 * self.lm_heads + 2 * self.lm_kv_heads) + m * d * self.lm_intermediate
        a = 2.0 * (self.lm_layers * lm_layer + d * self.lm_vocab)
        b = 2.0 * self.lm_layers * self.lm_heads * hd
        big_d, s2 = self.vit_hidden, self.merge_size ** 2
        mv = 3 if self.vit_gated_mlp else 2
        embed = self.in_channels * self.patch_size ** 2 * self.temporal_patch_size * big_d
        vit_layer = 4 * big_d * big_d + mv * big_d * self.vit_intermediate
        merger = (s2 * big_d) ** 2 + s2 * big_d * d
        c = 2.0 * (embed + self.vit_layers * vit_layer) + 2.0 * merger / s2
        e = 4.0 * self.vit_layers * big_d
        f = float(self.training_factor)
        return a * f, b * f, c * f, e * f

    def sample_costs(self, tokens: np.ndarray, patches: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """Training FLOPs per sample (float64).

        Args:
            tokens: Tokens ``T`` per sample (text + image tokens).
            patches: Patches ``P`` per image (before the merge), all images.
            owner: Sample index of each image (same length as ``patches``).
        """
        a, b, c, e = self.coefficients()
        t = np.asarray(tokens, dtype=np.float64)
        cost = a * t + b * t * t
        p = np.asarray(patches, dtype=np.float64)
        if p.size:
            cost += np.bincount(np.asarray(owner, dtype=np.int64), weights=c * p + e * p * p, minlength=t.shape[0])
        return cost

    @property
    def fitted(self) -> bool:
        """Whether the coefficients are given (fitted) rather than estimated from the architecture."""
        return self.per_token is not None

    def to_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (the YAML layout of :func:`load_cost_model`)."""
        return dataclasses.asdict(self)


def sample_components(tokens: np.ndarray, patches: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """The :data:`COMPONENTS` of every sample, shape ``(samples, 4)`` (float64).

    Args:
        tokens: Tokens ``T`` per sample.
        patches: Patches ``P`` per image (before the merge), all images.
        owner: Sample index of each image.
    """
    t = np.asarray(tokens, dtype=np.float64)
    out = np.zeros((t.shape[0], len(COMPONENTS)), order="F")  # column by column: each component contiguous
    out[:, 0] = t
    out[:, 1] = t * t
    p = np.asarray(patches, dtype=np.float64)
    if p.size:
        owner = np.asarray(owner, dtype=np.int64)
        out[:, 2] = np.bincount(owner, weights=p, minlength=t.shape[0])
        out[:, 3] = np.bincount(owner, weights=p * p, minlength=t.shape[0])
    return out


def load_cost_model(path: str | os.PathLike[str] | None) -> CostModel:
    """The default model, or one read from a YAML (or JSON) file of :class:`CostModel` field names.

    Fields left out keep their defaults. Raises :class:`UserError` naming the file
    on a missing or unreadable file, an unknown field or a bad value. A timing log
    (``.csv`` or ``.parquet``) is fitted instead: see :func:`packer.timing.load_model`.
    """
    if path is None:
        return CostModel()
    import yaml

    try:
        with open_input(path, "r") as fh:  # a local file or an object in a bucket
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise UserError(f"--cost-model {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise UserError(f"--cost-model {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"--cost-model {path}: expected a mapping of field: value, got {type(data).__name__}")
    names = [f.name for f in dataclasses.fields(CostModel)]
    unknown = sorted(set(map(str, data)) - set(names))
    if unknown:
        raise UserError(f"--cost-model {path}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(names)}")
    for name in (*COEFFICIENT_FIELDS, "training_factor"):  # YAML 1.1 reads 1e-7 (no dot) as a string
        if isinstance(data.get(name), str):
            try:
                data[name] = float(data[name])
            except ValueError:
                pass
    try:
        return CostModel(**data)
    except UserError as exc:
        raise UserError(f"--cost-model {path}: {exc}") from None


def image_patches(grids: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Patches per image and the owning sample of each image, from a ``list<list<int>>`` column of grids.

    Args:
        grids: One list of ``[t, h, w]`` grids (in patches, before the merge) per sample.

    Returns:
        ``(patches, owner)``: int64 arrays with one entry per image.
    """
    col = grids.combine_chunks() if isinstance(grids, pa.ChunkedArray) else grids
    n = len(col)
    per_sample = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if n == 0 or not per_sample.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    images = pc.list_flatten(col)
    sizes = pc.fill_null(pc.list_value_length(images), 0).to_numpy(zero_copy_only=False)
    if (sizes != 3).any():
        i = int(np.flatnonzero(sizes != 3)[0])
        raise UserError(f"image_grids: image {i} has a grid of {int(sizes[i])} values; expected [t, h, w]")
    thw = pc.list_flatten(images).to_numpy(zero_copy_only=False).astype(np.int64).reshape(-1, 3)
    owner = np.repeat(np.arange(n, dtype=np.int64), per_sample)
    return thw.prod(axis=1), owner


def _table_images(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tokens = table.column("tokens").to_numpy(zero_copy_only=False).astype(np.int64)
    if "image_grids" in table.column_names:
        patches, owner = image_patches(table.column("image_grids"))
    else:
        patches = owner = np.zeros(0, np.int64)
    return tokens, patches, owner


def table_costs(table: pa.Table, model: CostModel) -> np.ndarray:
    """Training FLOPs of every row of a lengths table (``tokens``, optional ``image_grids``).

    Lengths without ``image_grids`` (counted elsewhere) get the language-model
    part only.
    """
    return model.sample_costs(*_table_images(table))


def table_components(table: pa.Table) -> np.ndarray:
    """:func:`sample_components` of every row of a lengths table (image parts 0 without ``image_grids``)."""
    return sample_components(*_table_images(table))
