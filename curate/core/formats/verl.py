"""verl's RL Parquet rows (volcengine/verl; V-Triune and Orsta write the same) as RL records.

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
"""

from __future__ import annotations

from typing import Any

from curate.core.formats.rows import RecordInvalid

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


def is_row(raw: dict[str, Any]) -> bool:
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


def rl_row(raw: dict[str, Any]) -> dict[str, Any]:
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
