"""RL data: sampling answers and selecting prompts by Pass@N/Pass@1 (rl-filter), sharded scoring, the reward service."""
