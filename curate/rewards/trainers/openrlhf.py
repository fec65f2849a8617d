"""OpenRLHF: the remote reward protocol, served by ``curate serve-rewards``, and the same
function for OpenRLHF's local ``reward_func`` file mode.

OpenRLHF's PPO/GRPO trainer (``--remote_rm_url``) POSTs JSON
``{"query": [...], "prompts": [...], "labels": [...]}`` — ``query`` is prompt + response
decoded with special tokens, ``prompts`` the prompts, ``labels`` the dataset's
``--label_key`` values — and reads ``rewards`` (the reward of each item), ``scores``
(the [0, 1] value its dynamic filtering uses; taken from ``rewards`` when absent) and
``extra_logs`` (a mapping of per-item numbers it logs). ``curate serve-rewards``
answers it at ``POST /openrlhf`` (alias ``POST /get_reward``, the path of OpenRLHF's own
reward server)::

    curate serve-rewards --port 5000 &
    openrlhf.cli.train_ppo_ray ... --remote_rm_url http://127.0.0.1:5000/openrlhf --label_key label

A label is a record (mapping or JSON string with ``answer``, ``answer_type``, ``prompt_type``,
``reward``…) or a bare gold; for bare golds give the type in the URL:
``/openrlhf?answer_type=number`` (and ``&prompt_type=think``). The response part of each
query is what follows its prompt (see :func:`curate.rewards.trainers.common.response_of`).

Answer: ``rewards`` = the record's combined reward, ``scores`` = the accuracy (solved or
not, for dynamic filtering), ``extra_logs`` = ``{"accuracy": [...], "format": [...],
"verifier_error": [0/1 ...]}``, plus ``results`` (the full curate result of each item,
which OpenRLHF ignores).

Without a server, point ``--remote_rm_url`` at this file: OpenRLHF then calls
:func:`reward_func` (``queries, prompts, labels``) in a thread; answer types of bare golds
come from the ``CURATE_ANSWER_TYPE`` environment variable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from curate.rewards.trainers.common import record_from_label, response_of, score_batch


class ProtocolError(ValueError):
    """A request that does not follow the protocol (message says what is wrong)."""


def openrlhf_rewards(query: Sequence[str], prompts: Sequence[str] | None = None, labels: Sequence[Any] | None = None,
                     *, answer_type: str | None = None, prompt_type: str | None = None,
                     progress: float | None = None) -> dict[str, Any]:
    """The answer to one OpenRLHF remote-reward request (see the module docstring).

    Raises:
        ProtocolError: ``labels`` missing, or lists of different lengths.
    """
    n = len(query)
    if labels is None:
        raise ProtocolError("'labels' is missing: curate scores against gold answers; start OpenRLHF with "
                            "--label_key naming the dataset's answer column")
    if len(labels) != n or (prompts is not None and len(prompts) != n):
        raise ProtocolError(f"'query' has {n} items, 'prompts' {len(prompts) if prompts is not None else '-'}, "
                            f"'labels' {len(labels)}: they must have the same length")
    defaults = {"answer_type": answer_type, "prompt_type": prompt_type}
    records = [record_from_label(label, defaults) for label in labels]
    texts = [response_of(q, prompts[i] if prompts is not None else None) for i, q in enumerate(query)]
    results = score_batch(records, texts, progress=progress)
    return {
        "rewards": [r.reward for r in results],
        "scores": [r.accuracy for r in results],
        "extra_logs": {
            "accuracy": [r.accuracy for r in results],
            "format": [r.format for r in results],
            "verifier_error": [1.0 if r.error else 0.0 for r in results],
        },
        "results": [r.to_dict() for r in results],
    }


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
    """OpenRLHF's local reward-function hook (``--remote_rm_url /path/to/this/file.py``)."""
    return openrlhf_rewards(queries, prompts, labels, answer_type=os.environ.get("CURATE_ANSWER_TYPE"),
                            prompt_type=os.environ.get("CURATE_PROMPT_TYPE"))
