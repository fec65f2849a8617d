"""The RL trainers' row layouts, read as RL records: detected by their keys or named by the run (``--layout``).

A row of an RL trainer's own data file becomes, here and once, a row of curate's RL layout
(``problem``, ``answer``, ``answer_type`` or ``reward``, ``prompt_type``), with the reward its trainer
would give named for the verifiers (:mod:`curate.rewards.registry`):

* ``vlm-r1`` (:func:`vlm_r1_row`): VLM-R1's JSONL (``image``, ``conversations``,
  ``accu_reward_method``), detected by ``accu_reward_method``;
* ``verl`` (:func:`verl_row`): verl's Parquet as verl's examples, V-Triune and Orsta write it
  (``data_source``, ``prompt``, ``images``, ``reward_model``, ``extra_info``), detected by ``prompt`` and
  ``reward_model``;
* ``llava-ov-rl`` (:func:`llava_ov_rl_row`): LLaVA-OneVision-1.5-RL's released Parquet
  (``problem``, ``answer``, ``answer_type``, ``problem_type``, ``prompt_type``, ``source``, ``images``),
  detected by ``problem_type`` beside ``problem`` and ``answer_type``.

The row handed back is a new dict; the input row (what ``rl-filter`` and ``score`` write back) is never changed.
A layout named with a default reward method (VLM-R1's own ``--reward_method``, or ``rec`` for its REC
rewards) is written ``vlm-r1:METHOD``.

LLaVA-OneVision-1.5-RL's released Parquet rows (EvolvingLMMs-Lab/LLaVA-OneVision-1.5-RL) as RL records.

The released shards are written by ``dataset/create/dump_engine.py`` (at 9f9ce7d, lines 10-21 and 61-75): ``id``,
``images`` (``datasets`` images), ``problem``, ``answer`` (a list of strings), ``problem_type``, ``answer_type``,
``source`` and ``prompt_type`` (``default`` when the source gave none). The trainer's loader
(``dataset/dataset.py`` lines 81-94) gives every row whose ``prompt_type`` is not ``normal`` the thinking prompt,
so ``default`` (or none) is ``think`` here; the rest is curate's RL layout already (``answer_type`` names the
verifier, ``reward/reward_system.py`` lines 21-33): the simple answer types are scored by the seed's own rules
(:mod:`curate.rewards.verifiers.llava_ov_rl`), the others by curate's verifiers. Rows of ``problem_type``
``spatial-reasoning`` get the trainer's bonus of 0.5 when a box stands in the thinking (lines 65-68,
``reward/format.py`` lines 26-34) as ``reward.bonus``.

verl's RL Parquet rows (volcengine/verl; V-Triune and Orsta write the same) as RL records.

verl's ``RLHFDataset`` (``verl/utils/dataset/rl_dataset.py`` at b178a3c, lines 106-108 and 285-359) reads a row's
chat ``prompt`` (a list of ``{role, content}``, ``<image>`` where each image of ``images`` stands), its
``images`` (``datasets`` image structs), ``data_source``, ``ability``, ``reward_model`` (``style``,
``ground_truth``) and ``extra_info`` (``index``, ...); its examples write exactly that
(``examples/data_preprocess/geo3k.py`` lines 57-80). The reward is picked by ``data_source``
(``verl/utils/reward_score/__init__.py`` lines 44-107). V-Triune (MiniMax-AI/One-RL-to-See-Them-All) adds, under
``reward_model``, the per-sample ``verifier`` (``mathverify`` or ``detection``), ``accuracy_ratio``,
``format_ratio`` and ``verifier_parm`` (``verl/workers/reward_manager/remote.py`` lines 65-84) and the reward
server mixes accuracy and format as ``acc * a / (a + f) + fmt * f / (a + f)``, ``a`` 1.0 and ``f`` 0.1 when the
row gives none (``reward_server/reward_serving_fastapi.py`` lines 99-118).

Here: ``source`` is ``data_source``; ``answer`` is ``ground_truth``; the prompt is sent as the row gives it
(``prompt_ready``: no template around it), its last user turn as ``problem``; the ``reward`` names our verifier:

* V-Triune ``mathverify``: ``v-triune-math`` (:mod:`curate.rewards.verifiers.v_triune`, V-Triune's extraction and
  math-verify call) with V-Triune's format check (``v-triune-math``, ``verify.py`` lines 112-131);
* V-Triune ``detection``: its detection accuracy (``v-triune-math`` with ``method: detection``: the mix of greedy
  IoU matchings and COCO mAP weighted by ``verifier_parm.det_reward_ratio``, the 0.6 count penalty, the dynamic
  IoU threshold; ``verify.py`` lines 353-512) with its format check (``v-triune-detection``, lines 213-229);
* no verifier: by ``data_source`` as verl's ``default_compute_score``: ``hiyouga/geometry3k`` is the last boxed
  answer (``v-triune-math`` with ``method: geo3k``) with 0.9 accuracy and 0.1 of its format check (``geo3k.py``
  lines 19-35), the MATH sets curate's ``math``; any other names no
  verifier (the run's ``--answer-type`` decides, else the row is errored naming it).

VLM-R1's JSONL rows (om-ai-lab/VLM-R1, ``src/open-r1-multimodal/src/open_r1/grpo_jsonl.py``) as RL records.

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

# LLaVA-OneVision-1.5-RL's released Parquet rows (EvolvingLMMs-Lab/LLaVA-OneVision-1.5-RL) as RL records.
SPATIAL = "spatial-reasoning"
#: The bonus of a spatial-reasoning answer that names a box while thinking (``reward_system.py`` line 67).
SPATIAL_BOX_BONUS = 0.5


def is_llava_ov_rl_row(raw: dict[str, Any]) -> bool:
    """Whether a row is LLaVA-OneVision-1.5-RL's (``problem``, ``answer_type`` and ``problem_type``)."""
    return "problem" in raw and "answer_type" in raw and "problem_type" in raw


#: Answer types scored by the seed's own rule (:mod:`curate.rewards.verifiers.llava_ov_rl`); the others by curate's
#: verifier of the same name.
SEED_RULES = ("number", "boolean", "multiple-choice", "any", "ocrtext", "bbox")


def llava_ov_rl_row(raw: dict[str, Any]) -> dict[str, Any]:
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


# verl's RL Parquet rows (volcengine/verl; V-Triune and Orsta write the same) as RL records.
#: ``data_source`` -> (verifier, accuracy ratio, format ratio, format check) as verl's default_compute_score.
BY_SOURCE = {
    "hiyouga/geometry3k": ("v-triune-math", 0.9, 0.1, "verl-geo3k"),
    "lighteval/MATH": ("math", 1.0, 0.0, None),
    "DigitalLearningGmbH/MATH-lighteval": ("math", 1.0, 0.0, None),
    "HuggingFaceH4/MATH-500": ("math", 1.0, 0.0, None),
}
#: V-Triune's verifiers: name -> (our verifier, parameters, format check).
V_TRIUNE = {
    "mathverify": ("v-triune-math", {}, "v-triune-math"),
    "detection": ("v-triune-math", {"method": "detection"}, "v-triune-detection"),
}


def is_verl_row(raw: dict[str, Any]) -> bool:
    """Whether a row is verl's (``prompt`` and ``reward_model``)."""
    return "prompt" in raw and "reward_model" in raw


def _ratio(model: dict[str, Any], key: str, default: float) -> float:
    value = model.get(key)
    if value is None:
        return default
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise RecordInvalid("invalid_field", f"reward_model.{key} must be a number, got {value!r}") from None
    if not out >= 0:
        raise RecordInvalid("invalid_field", f"reward_model.{key} must be >= 0, got {value!r}")
    return out


def reward_of(model: dict[str, Any], data_source: Any) -> dict[str, Any] | None:
    """The ``reward`` object of a row's ``reward_model`` (None: the row names no verifier we know of)."""
    name = model.get("verifier")
    params: dict[str, Any]
    if name is not None:
        if str(name) not in V_TRIUNE:
            raise RecordInvalid("invalid_field", f"reward_model.verifier {name!r} is not one of V-Triune's "
                                                 f"({', '.join(V_TRIUNE)})")
        verifier, params, check = V_TRIUNE[str(name)]
        a, f = _ratio(model, "accuracy_ratio", 1.0), _ratio(model, "format_ratio", 0.1)
        given = model.get("verifier_parm") or {}
        if isinstance(given, str):  # some exports keep it as JSON text
            import json

            try:
                given = json.loads(given)
            except ValueError:
                raise RecordInvalid("invalid_field", "reward_model.verifier_parm is not JSON") from None
        if str(name) == "detection" and isinstance(given, dict):
            params = {**params, **{k: given[k] for k in ("det_reward_ratio",) if k in given}}
    elif str(data_source) in BY_SOURCE:
        verifier, a, f, check = BY_SOURCE[str(data_source)]
        params = {"method": "geo3k"} if verifier == "v-triune-math" else {}
    else:
        return None
    total = a + f
    if total <= 0:
        raise RecordInvalid("invalid_field", "reward_model: accuracy_ratio + format_ratio must be above 0")
    reward: dict[str, Any] = {"verifier": verifier, "parameters": dict(params), "accuracy_ratio": a / total,
                              "format_ratio": f / total}
    if check is not None:
        reward["format"] = check
    return reward


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones, an image part as <image>
        return "".join(p.get("text") or "" if isinstance(p, dict) and p.get("type") == "text" else
                       "<image>" if isinstance(p, dict) and p.get("type") in ("image", "image_url") else ""
                       for p in content)
    raise RecordInvalid("invalid_field", f"prompt content must be text or content parts, got {type(content).__name__}")


def verl_row(raw: dict[str, Any]) -> dict[str, Any]:
    """The RL row of a verl row (see the module docstring); the input row is not changed.

    Raises:
        RecordInvalid: ``invalid_field`` for a row whose ``prompt`` is no chat list with a user turn, or whose
            ``reward_model`` is not an object with a ``ground_truth``.
    """
    prompt, model = raw.get("prompt"), raw.get("reward_model")
    if not isinstance(prompt, list) or not prompt or not all(isinstance(t, dict) for t in prompt):
        raise RecordInvalid("invalid_field", "prompt must be a non-empty chat list of {role, content}")
    users = [t for t in prompt if t.get("role") == "user"]
    if not users:
        raise RecordInvalid("invalid_field", "prompt has no user turn")
    if not isinstance(model, dict) or model.get("ground_truth") is None:
        raise RecordInvalid("invalid_field", "reward_model must be an object with a ground_truth")
    out = {k: v for k, v in raw.items() if k != "prompt"}
    out["messages"] = [{"role": t.get("role"), "content": _text(t.get("content"))} for t in prompt]
    out["problem"] = _text(users[-1].get("content"))
    out["answer"] = model["ground_truth"]
    out["prompt_ready"] = True
    reward = reward_of(model, raw.get("data_source"))
    if reward is not None:
        out["reward"] = reward
    return out


# VLM-R1's JSONL rows (om-ai-lab/VLM-R1, ``src/open-r1-multimodal/src/open_r1/grpo_jsonl.py``) as RL records.
#: VLM-R1's ``accu_reward_method`` values (``grpo_jsonl.py`` lines 832-861; any other is ``default``), and ``rec``.
METHODS = ("default", "mcq", "yes_no", "llm", "map", "math", "weighted_sum", "od_ap", "od_ap50", "odLength",
           "all_match", "rec")


def is_vlm_r1_row(raw: dict[str, Any]) -> bool:
    """Whether a row is VLM-R1's (``conversations`` and ``accu_reward_method``)."""
    return "conversations" in raw and "accu_reward_method" in raw


def _turn(turns: Any, i: int) -> Any:
    if not isinstance(turns, list) or len(turns) < 2 or not isinstance(turns[i], dict) or "value" not in turns[i]:
        raise RecordInvalid("invalid_field", "a VLM-R1 row needs conversations with the problem and the solution "
                                             "(two turns with a 'value')")
    return turns[i]["value"]


def vlm_r1_row(raw: dict[str, Any], method: str | None = None) -> dict[str, Any]:
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


# The RL trainers' row layouts, read as RL records: detected by their keys or named by the run (``--layout``).
#: The ``--layout`` choices: ``auto`` detects each row's layout.
LAYOUTS = ("auto", "vlm-r1", "verl", "llava-ov-rl")


def detect(raw: dict[str, Any]) -> str | None:
    """The RL trainer layout a row is in, from its keys, or None (curate's own or any other layout)."""
    if is_verl_row(raw):
        return "verl"
    if is_vlm_r1_row(raw):
        return "vlm-r1"
    if is_llava_ov_rl_row(raw):
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
        return vlm_r1_row(raw, method or None)
    if name == "verl":
        return verl_row(raw)
    if name == "llava-ov-rl":
        return llava_ov_rl_row(raw)
    return raw


def layout_setting(layout: str | None, method: str | None = None) -> str | None:
    """The layout a run's parts carry: None for ``auto``, ``vlm-r1:METHOD`` for VLM-R1 with a default method."""
    if layout in (None, "auto"):
        return None
    return f"{layout}:{method}" if layout == "vlm-r1" and method else layout
