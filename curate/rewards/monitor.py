"""What the RL seeds log of a box answer beside its reward: IoU, precision and recall at IoU 0.5, 0.75 and 0.95.

V-Triune logs, per detection answer, the mean matched IoU over the gold boxes and the precision and recall of
a greedy IoU matching at 0.5, 0.75 and 0.95 (MiniMax-AI/One-RL-to-See-Them-All ``reward_server/verify.py``
lines 292-326 and 430-450). :func:`box_figures` gives the same figures for any record scored on boxes (``bbox``,
``detection``, and the seeds' box methods), so ``rl-filter`` reports them per source whatever the reward.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from curate.rewards.registry import plan
from curate.rewards.verdict import Context
from curate.rewards.verifiers.bbox import reconciled
from curate.rewards.verifiers.detection import greedy_match

#: The figures of one answer, in this order.
BOX_FIGURES = ("iou", "precision@0.5", "recall@0.5", "precision@0.75", "recall@0.75", "precision@0.95",
               "recall@0.95")
_BOX_VERIFIERS = ("bbox", "detection")
_BOX_METHODS = ("rec", "od_ap", "od_ap50", "odLength", "map", "weighted_sum", "bbox", "detection")


def is_box_task(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is scored on boxes (its verifier, or its seed method, is a box one)."""
    try:
        p = plan(record)
    except Exception:  # noqa: BLE001 - a record that cannot be scored has no figures
        return False
    method = p.params.get("method", p.params.get("answer_type")) if isinstance(p.params, Mapping) else None
    seeds = ("vlm-r1", "llava-ov-rl", "v-triune-math")
    return p.verifier.name in _BOX_VERIFIERS or (p.verifier.name in seeds and method in _BOX_METHODS)


def box_figures(record: Mapping[str, Any], response: str) -> list[float] | None:
    """:data:`BOX_FIGURES` of ``response`` against the record's gold boxes (labels matched when the gold has
    them); None when the record is not scored on boxes or its gold has no box."""
    if not is_box_task(record):
        return None
    p = plan(record)
    try:
        gold, pred = reconciled(response, [g for g in p.golds], {}, Context(record, None, p.prompt_type))
    except Exception:  # noqa: BLE001 - figures are monitoring: a box they cannot read is no figure
        return None
    if not gold:
        return None
    labels = any(g.label for g in gold)
    out: list[float] = []
    for t in (0.5, 0.75, 0.95):
        matches = greedy_match(gold, pred, t, labels) if pred else []
        if t == 0.5:
            out.append(sum(m[2] for m in matches) / len(gold))
        out += [len(matches) / len(pred) if pred else 0.0, len(matches) / len(gold)]
    return out

