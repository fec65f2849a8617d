"""Every verb of ``curate``, declared once: the one table the CLI, recipes, run planning and the report read.

A :class:`StageSpec` says where a verb's command lives, the first paragraph of its help, what a
recipe step of it hands to the next step, whether it writes ``OUT/report/`` when it ends, and which
plots and sample view its report page shows. Adding a verb is one entry here plus its module in
``curate/cli/`` (docs/architecture.md, "How to add a stage").

A spec holds its settings class and its result class as :class:`Ref` objects: written ``module:Class`` in the
table, imported the first time :meth:`Ref.load` is called. Loading every stage's config class takes 0.71 s
on this 2-core machine (numpy, PIL, the reward verifiers; ``python -X importtime``: dedup's config 0.62 s, rl's
0.44 s, recaption's 0.35 s) against 0.14 s for all of ``curate --help``, which lists every verb loading none.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


class Ref(str):
    """A class (or function) of another module, named ``module:attr`` and imported when first asked for.

    It is the string it was written as (``spec.config.partition(":")`` still works), and :meth:`load` returns the
    object itself.
    """

    __slots__ = ()

    def load(self) -> Any:
        """The object named (its module imported on the first call; Python caches modules)."""
        module, _, attr = self.partition(":")
        return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class StageSpec:
    """One verb.

    Attributes:
        name: the verb (``curate NAME``), also the ``stage`` its ``stats.json`` names.
        cli: the module of ``curate/cli`` that defines its command (imported only when the verb runs).
        help: the first paragraph of its help, as ``curate --help`` lists it.
        main_output: what a recipe step of this verb hands to the next step when named without a
            sub-path: the first that exists (Parquet when records carry image bytes), else the first;
            ``""`` the step's folder itself. None: not a recipe step.
        report: whether the verb writes ``OUT/report/`` for its ``--out`` when it ends.
        plots: the images in its output folder its report page shows.
        view: the function drawing its report page's samples (``module:function`` under ``curate.report``).
        config: the class of its settings (a :class:`Ref`, written ``module:Class``), whose fields declare its
            options once (:mod:`curate.core.settings`); ``spec.config.load()`` is the class.
        result: the typed view of its ``stats.json`` (a :class:`Ref`; :func:`curate.core.results.from_stats`).
    """

    name: str
    cli: str
    help: str
    main_output: tuple[str, ...] | None = None
    report: bool = False
    plots: tuple[str, ...] = ()
    view: str | None = None
    config: Ref | None = None
    result: Ref | None = None

    def __post_init__(self) -> None:
        for name in ("config", "result"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Ref):
                object.__setattr__(self, name, Ref(value))


_SPECS = (
    StageSpec("dedup", "dedup", "Remove exact, near and semantic duplicate records, and copies of benchmark images.",
              main_output=("records",), report=True, view="pages.dedup:dedup_html",
              config="curate.dedup.config:DedupConfig",
              result="curate.dedup.results:DedupResult"),
    StageSpec("balance", "balance", "Concept-balance records: embed → concept embeddings → tag → resample → report.",
              main_output=("records",), report=True, plots=("balance.png",), view="pages.balance:balance_html",
              config="curate.balance.config:BalanceConfig",
              result="curate.balance.results:BalanceResult"),
    StageSpec("embed", "balance", "Embed the images of records with open_clip (L2-normalised, float16).", report=True,
              config="curate.balance.config:EmbedConfig",
              result="curate.balance.results:EmbedResult"),
    StageSpec("tag", "balance", "Tag every embedding with its top-K nearest concepts (FAISS).", report=True,
              config="curate.balance.config:TagConfig",
              result="curate.balance.results:TagResult"),
    StageSpec("match", "balance", "Tag records by MetaCLIP's substring matching of their text against a vocabulary.",
              report=True, config="curate.balance.config:MatchConfig",
              result="curate.balance.results:TagResult"),
    StageSpec("resample", "balance", "Draw a concept-balanced selection of the tagged records.", report=True,
              plots=("balance.png",), view="pages.balance:balance_html", config="curate.balance.config:ResampleConfig",
              result="curate.balance.results:ResampleResult"),
    StageSpec("recaption", "recaption", "Write new captions (English and Chinese, or any language) for every image of records.",
              main_output=("records.jsonl", "records.parquet"), report=True, view="pages.recaption:recaption_html",
              config="curate.recaption.config:RecaptionConfig",
              result="curate.recaption.results:RecaptionResult"),
    StageSpec("rl-filter", "rl", "Keep the RL prompts a model solves sometimes but not reliably.",
              main_output=("kept.jsonl", "kept.parquet"), report=True, plots=("rl_filter.png",),
              view="pages.rl:rl_filter_html", config="curate.rl.config:RlFilterConfig",
              result="curate.rl.results:RlFilterResult"),
    StageSpec("score", "rl", "Score model responses with the rule-based verifiers (curate.rewards).",
              main_output=("scores.parquet",), report=True, view="pages.rl:score_html",
              config="curate.rl.config:ScoreConfig",
              result="curate.rl.results:ScoreResult"),
    StageSpec("serve-rewards", "rl", "Serve the reward verifiers over HTTP for RL trainers.",
              config="curate.rl.config:ServeRewardsConfig"),
    StageSpec("pack", "pack", "Pack records into sequences of at most --ctx tokens, as WebDataset shards.",
              main_output=("",), report=True, plots=("packing.png",), view="pages.pack:pack_html",
              config="packer.config:PackConfig",
              result="packer.results:PackResult"),
    StageSpec("verify", "pack",
              "Check a packed folder: every shard, boundary and count against its JSON and stats.json.",
              main_output=("",), config="packer.config:VerifyConfig"),
    StageSpec("energon-prepare", "pack",
              "Make a curate pack output folder a Megatron-Energon dataset (writes OUT/.nv-meta/)."),
    StageSpec("vocab", "vocab", "Build and embed the concept vocabulary used by curate balance.",
              config="curate.balance.config:VocabEmbedConfig",
              result="curate.balance.results:VocabEmbedResult"),
    StageSpec("run", "run", "Run a recipe: an ordered list of steps, each a verb with its options."),
    StageSpec("report", "report", "Write OUT/report/: a static HTML site showing what each stage did to the data."),
)

#: Every verb by name, in the order recipes list them.
STAGES: dict[str, StageSpec] = {spec.name: spec for spec in _SPECS}
#: The verbs a recipe step may run, in order.
RECIPE_VERBS: tuple[str, ...] = tuple(s.name for s in _SPECS if s.main_output is not None)


def stage(name: str) -> StageSpec | None:
    """The spec of verb ``name`` (also a ``stats.json`` stage), None for an unknown one."""
    return STAGES.get(name)
