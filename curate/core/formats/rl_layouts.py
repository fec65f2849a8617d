"""The RL trainers' row layouts, read as RL records: detected by their keys or named by the run (``--layout``).

A row of an RL trainer's own data file becomes, here and once, a row of curate's RL layout
(``problem``, ``answer``, ``answer_type`` or ``reward``, ``prompt_type``), with the reward its trainer
would give named for the verifiers (:mod:`curate.rewards.registry`):

* ``vlm-r1`` (:mod:`curate.core.formats.vlm_r1`): VLM-R1's JSONL (``image``, ``conversations``,
  ``accu_reward_method``), detected by ``accu_reward_method``;
* ``verl`` (:mod:`curate.core.formats.verl`): verl's Parquet as verl's examples, V-Triune and Orsta write it
  (``data_source``, ``prompt``, ``images``, ``reward_model``, ``extra_info``), detected by ``prompt`` and
  ``reward_model``;
* ``llava-ov-rl`` (:mod:`curate.core.formats.llava_ov_rl`): LLaVA-OneVision-1.5-RL's released Parquet
  (``problem``, ``answer``, ``answer_type``, ``problem_type``, ``prompt_type``, ``source``, ``images``),
  detected by ``problem_type`` beside ``problem`` and ``answer_type``.

The row handed back is a new dict; the input row (what ``rl-filter`` and ``score`` write back) is never changed.
A layout named with a default reward method (VLM-R1's own ``--reward_method``, or ``rec`` for its REC
rewards) is written ``vlm-r1:METHOD``.
"""

from __future__ import annotations

from typing import Any

from curate.core.formats import llava_ov_rl, verl, vlm_r1

#: The ``--layout`` choices: ``auto`` detects each row's layout.
LAYOUTS = ("auto", "vlm-r1", "verl", "llava-ov-rl")


def detect(raw: dict[str, Any]) -> str | None:
    """The RL trainer layout a row is in, from its keys, or None (curate's own or any other layout)."""
    if verl.is_row(raw):
        return "verl"
    if vlm_r1.is_row(raw):
        return "vlm-r1"
    if llava_ov_rl.is_row(raw):
        return "llava-ov-rl"
    return None


def rl_row(raw: dict[str, Any], layout: str | None = None) -> dict[str, Any]:
    """``raw`` as a row of curate's RL layout when it is in an RL trainer's layout (``layout``, or detected when
    None or ``auto``); any other row is handed back as it is.

    Raises:
        RecordInvalid: the row is not a usable row of the named or detected layout (``invalid_field``).
    """
    name, _, method = (layout or "auto").partition(":")
    if name == "auto":
        name = detect(raw) or ""
    if name == "vlm-r1":
        return vlm_r1.rl_row(raw, method or None)
    if name == "verl":
        return verl.rl_row(raw)
    if name == "llava-ov-rl":
        return llava_ov_rl.rl_row(raw)
    return raw


def layout_setting(layout: str | None, method: str | None = None) -> str | None:
    """The layout a run's parts carry: None for ``auto``, ``vlm-r1:METHOD`` for VLM-R1 with a default method."""
    if layout in (None, "auto"):
        return None
    return f"{layout}:{method}" if layout == "vlm-r1" and method else layout
