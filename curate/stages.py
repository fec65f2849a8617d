"""Every verb of ``curate``, declared once: the one table the CLI, recipes, run planning and the report read.

A :class:`StageSpec` says where a verb's command lives, the first paragraph of its help, what a
recipe step of it hands to the next step, whether it writes ``OUT/report/`` when it ends, and which
plots and sample view its report page shows. Adding a verb is one entry here plus its ``Verb`` in
``curate/verbs/`` (docs/architecture.md, "How to add a stage"); a filter stage
(:class:`curate.core.filters.RecordFilter`) is one entry naming it (``filter=``), its verb made from it by
``curate/verbs/filters.py``. This module imports nothing, so the CLI can list every verb without loading any of
them. The tables derived from :data:`STAGES` (:data:`RECIPE_VERBS`, :data:`MAIN_OUTPUTS`) read it when asked.

A spec holds its settings class and its result class as :class:`Ref` objects: written ``module:Class`` in the
table, imported the first time :meth:`Ref.load` is called. Loading every stage's config class takes 0.71 s
on this 2-core machine (numpy, PIL, the reward verifiers; ``python -X importtime``: dedup's config 0.62 s, rl's
0.44 s, recaption's 0.35 s) against 0.14 s for all of ``curate --help``, which lists every verb loading none.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
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
        cli: its family: ``curate/verbs/<cli>.py`` holds it (its options and ``prepare``, read by the command line
            and recipes alike; the group makes its command from them), or, for a command that is not a verb of
            values (``run``, ``report``, ``serve-rewards``...), ``curate/cli/<cli>.py`` registers it; imported only
            when the verb runs.
        help: the first paragraph of its help, as ``curate --help`` lists it.
        main_output: what a recipe step of this verb hands to the next step when named without a
            sub-path: the first that exists (Parquet when records carry image bytes), else the first;
            ``""`` the step's folder itself. None: not a recipe step.
        report: whether the verb writes ``OUT/report/`` for its ``--out`` when it ends.
        plots: the images in its output folder its report page shows.
        filter: a filter stage's :class:`~curate.core.filters.RecordFilter` subclass (or ``module:Class``):
            its verb (``cli="filters"``) is made from it, the filter's fields its options.
        view: the function drawing its report page's samples (``module:function`` under ``curate.report``).
        config: the class of its settings (a :class:`Ref`, written ``module:Class``), whose fields declare its
            options once (:mod:`curate.core.settings`); ``spec.config.load()`` is the class.
        result: the typed view of its ``stats.json`` (a :class:`Ref`; :func:`curate.core.stats.from_stats`).
    """

    name: str
    cli: str
    help: str
    main_output: tuple[str, ...] | None = None
    report: bool = False
    plots: tuple[str, ...] = ()
    filter: type | str | None = None
    view: str | None = None
    config: Ref | None = None
    result: Ref | None = None

    def __post_init__(self) -> None:
        for name in ("config", "result"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Ref):
                object.__setattr__(self, name, Ref(value))
        if isinstance(self.filter, str) and not isinstance(self.filter, Ref):
            object.__setattr__(self, "filter", Ref(self.filter))

    def filter_class(self) -> type:
        """The :class:`~curate.core.filters.RecordFilter` subclass of a filter stage (a class, or a ``Ref`` loaded)."""
        if self.filter is None:
            raise TypeError(f"{self.name}: not a filter stage")
        return self.filter.load() if isinstance(self.filter, Ref) else self.filter


_SPECS = (
    StageSpec("dedup", "dedup", "Remove exact, near and semantic duplicate records, and copies of benchmark images.",
              main_output=("records",), report=True, view="pages:dedup_html",
              config="curate.dedup.config:DedupConfig",
              result="curate.dedup.config:DedupResult"),
    StageSpec("balance", "balance", "Concept-balance records: embed → concept embeddings → tag → resample → report.",
              main_output=("records",), report=True, plots=("balance.png",), view="pages:balance_html",
              config="curate.balance.config:BalanceConfig",
              result="curate.balance.config:BalanceResult"),
    StageSpec("embed", "balance", "Embed the images of records with open_clip (L2-normalised, float16).", report=True,
              config="curate.balance.config:EmbedConfig",
              result="curate.balance.config:EmbedResult"),
    StageSpec("tag", "balance", "Tag every embedding with its top-K nearest concepts (FAISS).", report=True,
              config="curate.balance.config:TagConfig",
              result="curate.balance.config:TagResult"),
    StageSpec("match", "balance", "Tag records by MetaCLIP's substring matching of their text against a vocabulary.",
              report=True, config="curate.balance.config:MatchConfig",
              result="curate.balance.config:TagResult"),
    StageSpec("resample", "balance", "Draw a concept-balanced selection of the tagged records.", report=True,
              plots=("balance.png",), view="pages:balance_html", config="curate.balance.config:ResampleConfig",
              result="curate.balance.config:ResampleResult"),
    StageSpec("recaption", "recaption", "Write new captions (English and Chinese, or any language) for every image of records.",
              main_output=("records.jsonl", "records.parquet"), report=True, view="pages:recaption_html",
              config="curate.recaption.config:RecaptionConfig",
              result="curate.recaption.config:RecaptionResult"),
    StageSpec("rl-filter", "rl", "Keep the RL prompts a model solves sometimes but not reliably.",
              main_output=("kept.jsonl", "kept.parquet"), report=True, plots=("rl_filter.png",),
              view="pages:rl_filter_html", config="curate.rl.config:RlFilterConfig",
              result="curate.rl.config:RlFilterResult"),
    StageSpec("score", "rl", "Score model responses with the rule-based verifiers (curate.rewards).",
              main_output=("scores.parquet",), report=True, view="pages:score_html",
              config="curate.rl.config:ScoreConfig",
              result="curate.rl.config:ScoreResult"),
    StageSpec("serve-rewards", "rl", "Serve the reward verifiers over HTTP for RL trainers.",
              config="curate.rl.config:ServeRewardsConfig"),
    StageSpec("pack", "pack", "Pack records into sequences of at most --ctx tokens, as WebDataset shards.",
              main_output=("",), report=True, plots=("packing.png",), view="pages:pack_html",
              config="packer.config:PackConfig",
              result="packer.config:PackResult"),
    StageSpec("verify", "pack",
              "Check a packed folder: every shard, boundary and count against its JSON and stats.json.",
              main_output=("",), config="packer.config:VerifyConfig"),
    StageSpec("energon-prepare", "pack",
              "Make a curate pack output folder a Megatron-Energon dataset (writes OUT/.nv-meta/)."),
    StageSpec("vocab", "vocab", "Build and embed the concept vocabulary used by curate balance.",
              config="curate.balance.config:VocabEmbedConfig",
              result="curate.balance.config:VocabEmbedResult"),
    StageSpec("run", "run", "Run a recipe: an ordered list of steps, each a verb with its options."),
    StageSpec("report", "report", "Write OUT/report/: a static HTML site showing what each stage did to the data."),
)


class _RecipeVerbs(Sequence[str]):
    """The verbs a recipe step may run, in order: those of a table with a ``main_output``, read when asked."""

    def __init__(self, table: dict[str, StageSpec]) -> None:
        self.table = table

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, spec in self.table.items() if spec.main_output is not None)

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - an index or a slice
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __hash__(self) -> int:
        return id(self)


class _MainOutputs(Mapping[str, tuple[str, ...]]):
    """What each recipe verb of a table hands on (:attr:`StageSpec.main_output`), read when asked."""

    def __init__(self, table: dict[str, StageSpec]) -> None:
        self.table = table

    def __getitem__(self, name: str) -> tuple[str, ...]:
        spec = self.table[name]
        if spec.main_output is None:
            raise KeyError(name)
        return spec.main_output

    def __iter__(self) -> Iterator[str]:
        return iter(_RecipeVerbs(self.table))

    def __len__(self) -> int:
        return len(_RecipeVerbs(self.table))


class StageTable(dict[str, StageSpec]):
    """The verbs by name, and the tables derived from them, read when asked: a row added (a filter stage, a
    test's) reaches every consumer."""

    @property
    def recipe_verbs(self) -> Sequence[str]:
        """The verbs a recipe step may run, in order."""
        return _RecipeVerbs(self)

    @property
    def main_outputs(self) -> Mapping[str, tuple[str, ...]]:
        """What a recipe step of each verb hands to the next (:attr:`StageSpec.main_output`)."""
        return _MainOutputs(self)


#: Every verb by name, in the order recipes list them.
STAGES: StageTable = StageTable((spec.name, spec) for spec in _SPECS)
#: The verbs a recipe step may run, in order.
RECIPE_VERBS: Sequence[str] = STAGES.recipe_verbs
#: What a recipe step of each verb hands to the next.
MAIN_OUTPUTS: Mapping[str, tuple[str, ...]] = STAGES.main_outputs


def stage(name: str) -> StageSpec | None:
    """The spec of verb ``name`` (also a ``stats.json`` stage), None for an unknown one."""
    return STAGES.get(name)
