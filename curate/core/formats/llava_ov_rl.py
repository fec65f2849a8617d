"""LLaVA-OneVision-1.5-RL's released Parquet rows (EvolvingLMMs-Lab/LLaVA-OneVision-1.5-RL) as RL records.

The released shards are written by ``dataset/create/dump_engine.py`` (at 9f9ce7d, lines 10-21 and 61-75): ``id``,
``images`` (``datasets`` images), ``problem``, ``answer`` (a list of strings), ``problem_type``, ``answer_type``,
``source`` and ``prompt_type`` (``default`` when the source gave none). The trainer's loader
(``dataset/dataset.py`` lines 81-94) gives every row whose ``prompt_type`` is not ``normal`` the thinking prompt,
so ``default`` (or none) is ``think`` here; the rest is curate's RL layout already (``answer_type`` names the
verifier, ``reward/reward_system.py`` lines 21-33): the simple answer types are scored by the seed's own rules
(:mod:`curate.rewards.verifiers.llava_ov_rl`), the others by curate's verifiers. Rows of ``problem_type``
``spatial-reasoning`` get the trainer's bonus of 0.5 when a box stands in the thinking (lines 65-68,
``reward/format.py`` lines 26-34) as ``reward.bonus``.
"""

from __future__ import annotations

from typing import Any

SPATIAL = "spatial-reasoning"
#: The bonus of a spatial-reasoning answer that names a box while thinking (``reward_system.py`` line 67).
SPATIAL_BOX_BONUS = 0.5


def is_row(raw: dict[str, Any]) -> bool:
    """Whether a row is LLaVA-OneVision-1.5-RL's (``problem``, ``answer_type`` and ``problem_type``)."""
    return "problem" in raw and "answer_type" in raw and "problem_type" in raw


#: Answer types scored by the seed's own rule (:mod:`curate.rewards.verifiers.llava_ov_rl`); the others by curate's
#: verifier of the same name.
SEED_RULES = ("number", "boolean", "multiple-choice", "any", "ocrtext", "bbox")


def rl_row(raw: dict[str, Any]) -> dict[str, Any]:
    """The RL row: ``prompt_type`` ``think`` unless ``normal``; the seed's rule for its simple answer types; a
    spatial-reasoning row's box bonus."""
    out = dict(raw)
    if str(raw.get("prompt_type") or "").lower() != "normal":
        out["prompt_type"] = "think"
    if "reward" in raw:
        return out
    reward: dict[str, Any] = {}
    kind = str(raw.get("answer_type") or "").strip().lower()
    if kind in SEED_RULES:
        reward.update(verifier="llava-ov-rl", parameters={"answer_type": kind})
    if str(raw.get("problem_type")) == SPATIAL:
        reward["bonus"] = {"box_in_think": SPATIAL_BOX_BONUS}
    if reward:
        out["reward"] = reward
    return out
