"""Rule-based reward verifiers for RL data selection and RL training.

Import from the module that holds each name (this package re-exports nothing)::

    from curate.rewards.registry import score, score_many, VERIFIERS, answer_types

    result = score({"answer": "B", "answer_type": "multiple-choice"}, "<answer>(B)</answer>")
    result.accuracy, result.format, result.reward, result.error, result.verifier

- :mod:`curate.rewards.registry`: :func:`~curate.rewards.registry.score` /
  :func:`~curate.rewards.registry.score_many` route a record to its verifier (``answer_type`` or
  ``reward.verifier``), compute accuracy and format, and combine them into ``reward``;
  ``VERIFIERS`` maps verifier names to callables ``VERIFIERS[name](record, response)``;
  ``answer_types()`` lists the accepted ``answer_type`` values; ``plan`` checks a record up front.
- :mod:`curate.rewards.verdict`: ``RewardResult``; an unknown ``answer_type`` raises
  ``UnknownAnswerType`` (a :class:`curate.core.errors.UserError`); a malformed record raises
  ``RecordError``. Verifier errors and timeouts never raise: they score 0 with ``error`` set.
- :mod:`curate.rewards.runtime.limits`: ``configure`` sets the worker pool used for time-limited
  work, ``warm_up`` starts it ahead of the first call; :mod:`curate.rewards.pool`: ``shutdown``
  stops it and the code sandboxes; :mod:`curate.rewards.counters`: ``counters()`` reports calls and
  errors per reason. Model-written programs run in an OS sandbox
  (:mod:`curate.rewards.runtime.sandbox`), or not at all (``sandbox_unavailable``).
- :mod:`curate.rewards.boxes` (``dynamic_iou_threshold``, ``smart_resize``) and
  :mod:`curate.rewards.format` (``format_score``) hold the pieces the verifiers share.

See :mod:`curate.rewards.registry` for the record fields and the weighting, each
verifier module for its rules, :mod:`curate.rewards.runtime.limits` for the time limits,
:mod:`curate.rl.score` for scoring files (``curate score``),
:mod:`curate.rl.serve` for the HTTP service (``curate serve-rewards``, also OpenRLHF's remote
reward protocol) and :mod:`curate.rewards.trainers` for the TRL, verl, OpenRLHF and AReaL adapters.
"""
