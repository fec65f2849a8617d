"""Reward adapters for RL trainers: the verifiers of ``curate.rewards`` where trainers call them.

Each adapter is a thin layer over :func:`curate.rewards.registry.score_many` (same verifiers, same
time limits in curate's worker processes, never on the trainer's thread):

- :mod:`curate.rewards.trainers.trl`: ``accuracy_reward`` / ``format_reward`` /
  ``curate_reward`` for ``trl.GRPOTrainer(reward_funcs=...)``, and ``kept_dataset`` (rl-filter's
  ``kept.jsonl`` as a ``datasets.Dataset``);
- :mod:`curate.rewards.trainers.verl`: ``compute_score`` for ``custom_reward_function.path``;
- :mod:`curate.rewards.trainers.openrlhf`: the remote reward protocol (served by
  ``curate serve-rewards`` at ``/openrlhf``) and ``reward_func`` for its file mode;
- :mod:`curate.rewards.trainers.areal`: ``reward_fn`` for AReaL's RLVR workflows.

:mod:`curate.rewards.trainers.common` turns labels, dataset columns and completions into
records and response texts, in one place for all of them. Importing an adapter does not
import its trainer.
"""
