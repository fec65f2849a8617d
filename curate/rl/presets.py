"""The RL seeds' own settings as named presets of ``curate rl-filter`` and ``curate score`` (``--preset``).

A preset gives the settings a seed's code uses; a setting the user gives (any value other than its default) wins.
``score`` takes the part that decides a reward (:data:`SCORING`: the layout, with the format checks and bonuses
it brings, and VLM-R1's reward method), not the sampling or the selection.
Each value is read from the seed's repository at the commit named:

``llava-ov-1.5-rl`` (EvolvingLMMs-Lab/LLaVA-OneVision-1.5-RL at 9f9ce7d)
    N = 16, 4,096 new tokens, temperature 1.0: ``configs/llavaov15-8b_stage1_grpo.yaml`` lines 29-34 (``gconfig``;
    the data script's own sampling, ``dataset/create/__main__.py`` line 146, is 4,096 tokens too); the rows read in
    its layout (``--layout llava-ov-rl``: the spatial-reasoning box bonus of ``reward/reward_system.py`` lines
    65-68 comes with it); the per-source band of ``dataset/create/__main__.py`` lines 45-67: mean reward strictly
    inside (0.0, 0.6) (``dump_engine.py`` line 60), or (-1, 2) for the sources kept whole.
``vlm-r1-rec`` (om-ai-lab/VLM-R1 at 90052f4)
    N = 8 and 2,048 new tokens: ``run_scripts/run_grpo_rec.sh`` lines 49-50; temperature 0.9: the trainer's
    default, ``src/open-r1-multimodal/src/open_r1/trainer/grpo_config.py`` lines 192-195; VLM-R1's JSONL with its
    REC rewards (``--layout vlm-r1 --reward-method rec``: ``iou_reward`` and ``format_reward_rec``,
    ``vlm_modules/qwen_module.py`` lines 88-191, as the script's ``--task_type rec``, lines 8-13).
``v-triune`` (MiniMax-AI/One-RL-to-See-Them-All at its fetched head)
    N = 8, 2,048 new tokens, temperature 1.0: ``scripts/train.sh`` lines 48, 71 and 73; verl's Parquet with the
    per-sample verifiers (``--layout verl``); the dynamic IoU threshold (``scripts/reward_server.sh`` line 4,
    ``reward_server/verify.py`` lines 455-462). V-Triune draws its chain-of-thought instruction from a pool of
    sentences (``verl/utils/dataset/rl_dataset.py`` lines 33-105, 255-259): give them with ``--templates``
    (a list of templates per style, one drawn per prompt from ``--seed``); curate does not ship the seed's text.
"""

from __future__ import annotations

from typing import Any

#: LLaVA-OneVision-1.5-RL's per-source thresholds (``dataset/create/__main__.py`` lines 45-67, written there as
#: ``(max, min)``): the band of the mean reward, strictly inside.
LLAVA_OV_BANDS: dict[str, tuple[float, float]] = {
    **{s: (0.0, 0.6) for s in ("mathvision", "docvqa", "infographicvqa", "ocrbench", "mmstar", "webcode", "treebench",
                               "refl4", "refspatial", "virl39k", "ai2d", "pixmo_count", "unisvg")},
    **{s: (-1.0, 2.0) for s in ("mmmu_bio", "mmmu_chem", "mmmu_phys", "mmmu_geo", "mmmu_cs", "codeforces", "sat2",
                                "virgorlsa")},
}

#: Preset name -> the settings it gives (field names of :class:`curate.rl.config.RlFilterConfig`).
PRESETS: dict[str, dict[str, Any]] = {
    "llava-ov-1.5-rl": {"n": 16, "max_new_tokens": 4096, "temperature": 1.0, "layout": "llava-ov-rl",
                        "band": (0.0, 0.6)},
    "vlm-r1-rec": {"n": 8, "max_new_tokens": 2048, "temperature": 0.9, "layout": "vlm-r1", "reward_method": "rec"},
    "v-triune": {"n": 8, "max_new_tokens": 2048, "temperature": 1.0, "layout": "verl"},
}
#: The settings of a preset that decide a response's reward, the ones ``curate score`` takes (the layout brings the
#: seed's format checks and bonuses with it: VLM-R1's per-method format check, LLaVA-OV-1.5-RL's box bonus).
SCORING = ("layout", "reward_method")
#: Per-source thresholds a preset brings (``--thresholds`` entries, under any the user's file gives).
PRESET_SOURCES: dict[str, dict[str, dict[str, Any]]] = {
    "llava-ov-1.5-rl": {src: {"band": list(band)} for src, band in LLAVA_OV_BANDS.items()},
}


def preset_values(name: str | None, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The settings of preset ``name`` (empty for None); with ``only``, those of these names (e.g. :data:`SCORING`)."""
    values = dict(PRESETS[name]) if name else {}
    return values if only is None else {k: v for k, v in values.items() if k in only}


def preset_sources(name: str | None) -> dict[str, dict[str, Any]]:
    """The per-source thresholds of preset ``name`` (empty for None or a preset without any)."""
    return {k: dict(v) for k, v in PRESET_SOURCES.get(name or "", {}).items()}
