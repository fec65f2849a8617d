"""``curate run RECIPE``: a recipe's steps (verbs with their options) run in order into ``OUT/NN-name/``.

``recipe`` reads the YAML (with line numbers for messages), ``plan`` turns each step
into its verb's values (:mod:`curate.verbs`), builds every step's config before the first runs, and decides what
runs, resumes or is skipped, and ``runner`` runs the steps' verbs and writes ``recipe.lock.yaml``.
"""

from __future__ import annotations

from curate.run.plan import PlannedStep, plan_run
from curate.run.recipe import Recipe, Step, load_recipe, parse_sets
from curate.run.runner import run_recipe

__all__ = ["PlannedStep", "Recipe", "Step", "load_recipe", "parse_sets", "plan_run", "run_recipe"]
