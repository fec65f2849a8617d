"""``curate run RECIPE``: a recipe's steps (verbs with their options) run in order into ``OUT/NN-name/``.

``recipe`` reads the YAML (with line numbers for messages), ``plan`` turns each step
into the verb's own command line and decides what runs, resumes or is skipped, and
``runner`` runs the steps through the command line's verbs and writes ``recipe.lock.yaml``.
"""

from __future__ import annotations

from curate.run.plan import PlannedStep, VerbInfo, VerbTable, plan_run
from curate.run.recipe import Recipe, Step, load_recipe, parse_sets
from curate.run.runner import run_recipe

__all__ = ["PlannedStep", "Recipe", "Step", "VerbInfo", "VerbTable", "load_recipe", "parse_sets", "plan_run",
           "run_recipe"]
