"""VLM-R1's JSONL rows (om-ai-lab/VLM-R1, ``src/open-r1-multimodal/src/open_r1/grpo_jsonl.py``) as RL records.

VLM-R1's loader (``grpo_jsonl.py`` lines 963-991 at 90052f4) reads one JSON object a line:

* ``image``: a path or a list of paths, relative to the image folder given beside the data file
  (``--image_folders``; here the input file's own folder or ``--image-root``);
* ``conversations``: the first turn's ``value`` is the problem, its ``<image>`` removed (line 979); the second
  turn's ``value`` is the solution, ``<answer>`` and ``</answer>`` removed and stripped (line 984), a number kept
  as its text (line 987);
* ``accu_reward_method``: the accuracy reward of the row (line 990), else the run's ``--reward_method`` for the
  file, else ``default`` (lines 952-953).

The reward is named for the ``vlm-r1`` verifier (:mod:`curate.rewards.verifiers.vlm_r1`), which scores as
``accuracy_reward`` (lines 826-879) does for each method, and for VLM-R1's format check, ``format_reward``
(lines 882-897), or, with the REC rewards (``rec``: VLM-R1's ``--task_type rec`` with
``--is_reward_customized_from_vlm_module``, ``vlm_modules/qwen_module.py`` lines 88-191), ``format_reward_rec``.
VLM-R1's GRPO reward is the sum of the two (``reward_funcs`` ``accuracy`` and ``format``, each weighted 1): both
ratios are 1 here, so the record's reward is that sum halved, in [0, 1]. The question template of the trainer
(``qwen_module.py`` lines 69-85) asks for ``<think>`` then ``<answer>``: the record's ``prompt_type`` is ``think``.
"""

from __future__ import annotations

from typing import Any

from curate.core.formats.rows import RecordInvalid

#: VLM-R1's ``accu_reward_method`` values (``grpo_jsonl.py`` lines 832-861; any other is ``default``), and ``rec``.
METHODS = ("default", "mcq", "yes_no", "llm", "map", "math", "weighted_sum", "od_ap", "od_ap50", "odLength",
           "all_match", "rec")


def is_row(raw: dict[str, Any]) -> bool:
    """Whether a row is VLM-R1's (``conversations`` and ``accu_reward_method``)."""
    return "conversations" in raw and "accu_reward_method" in raw


def _turn(turns: Any, i: int) -> Any:
    if not isinstance(turns, list) or len(turns) < 2 or not isinstance(turns[i], dict) or "value" not in turns[i]:
        raise RecordInvalid("invalid_field", "a VLM-R1 row needs conversations with the problem and the solution "
                                             "(two turns with a 'value')")
    return turns[i]["value"]


def rl_row(raw: dict[str, Any], method: str | None = None) -> dict[str, Any]:
    """The RL row of a VLM-R1 row: ``problem``, ``answer`` (the solution), ``prompt_type: think`` and a ``reward``
    naming the ``vlm-r1`` verifier with the row's method (``accu_reward_method``, else ``method``, else
    ``default``); the image columns as they are.

    Raises:
        RecordInvalid: ``invalid_field`` for a row without its two turns, or a problem that is not text.
    """
    problem = _turn(raw.get("conversations"), 0)
    solution = _turn(raw.get("conversations"), 1)
    if not isinstance(problem, str):
        raise RecordInvalid("invalid_field", "conversations[0].value (the problem) must be text")
    if isinstance(solution, str):
        answer = solution.replace("<answer>", "").replace("</answer>", "").strip()
    else:
        answer = str(solution)
    chosen = raw.get("accu_reward_method") or method or "default"
    chosen = str(chosen)
    out = {k: v for k, v in raw.items() if k != "conversations"}
    out.update(problem=problem.replace("<image>", ""), answer=answer, prompt_type="think",
               reward={"verifier": "vlm-r1", "parameters": {"method": chosen},
                       "format": "vlm-r1-rec" if chosen == "rec" else "vlm-r1",
                       "accuracy_ratio": 1.0, "format_ratio": 1.0})
    return out
