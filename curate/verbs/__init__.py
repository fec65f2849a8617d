"""The verbs as functions of values: what ``curate VERB --flags`` and a recipe step both call.

A :class:`Verb` is its options (:class:`~curate.core.settings.SettingInfo`: made from its settings class's fields,
plus the few shared here: the executor's, the image limits, ``--image-root``) and ``prepare``, which builds its
config from :class:`Values` (every option's value, defaults included) and returns a :class:`Prepared`: the config
and the work, not yet run. The click command (:func:`curate.cli.options.verb_command`) parses its flags into values
and calls ``prepare``; ``curate run`` (:mod:`curate.run.plan`) converts a step's YAML into values and calls the same
``prepare``: to check every step before the first runs, it builds each one's ``Prepared`` and runs none.

Each family's verbs live in ``curate/verbs/<family>.py`` (the module ``StageSpec.cli`` names, as in ``curate/cli``),
imported when one of them is asked for (:func:`verb`); a filter stage's verb is made from its row (:mod:`.filters`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from curate.core import validate as v
from curate.core.limits import DEFAULT_MAX_IMAGES, MAX_THREADS, MAX_WORKERS
from curate.core.errors import UserError
from curate.core.settings import (IMAGE_ROOT_HELP, SEED_HELP, SettingInfo, convert, default_workers, option,
                                  settings_of)
from curate.executors import EXECUTORS
from curate.stages import STAGES


class Values(dict[str, Any]):
    """Every option of a verb by name, defaults included; ``given``: those set on the command line or by a recipe
    (a flag of another mode given is refused, not ignored; ``--workers`` not given fills a Ray cluster)."""

    def __init__(self, values: Mapping[str, Any], given: Iterable[str] = ()) -> None:
        super().__init__(values)
        self.given = frozenset(given)


@dataclass(frozen=True)
class Prepared:
    """What a verb returns once its settings are built and checked: its config, and ``run``, which does the work.

    The click command runs it; a recipe's check of its steps (``curate run``, ``--dry-run`` too) builds every
    step's ``Prepared`` and runs none.
    """

    config: Any
    run: Callable[[], Any]


@dataclass(frozen=True)
class Verb:
    """One verb: its positional argument (``inputs``, or verify's ``out``), its options in ``--help`` order, and
    ``prepare(values) -> Prepared``, whose docstring is the verb's help."""

    name: str
    argument: SettingInfo | None
    options: tuple[SettingInfo, ...]
    prepare: Callable[[Values], Prepared]
    #: Flags the verb no longer takes, each with the one line that says where it went (``tag --match``).
    moved: tuple[tuple[str, str], ...] = ()
    by_key: dict[str, SettingInfo] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys: dict[str, SettingInfo] = {}
        for info in self.options:  # by flag (without --) and by name with dashes, as a recipe may write either
            keys.setdefault(info.flag[2:], info)
            keys.setdefault(info.name.replace("_", "-"), info)
        object.__setattr__(self, "by_key", keys)

    def option(self, key: str) -> SettingInfo | None:
        """The option a recipe key (``ctx``, ``near-threshold``, ``near_threshold``) names, None for no option."""
        return self.by_key.get(key.replace("_", "-"))

    def values(self, given: Mapping[str, Any]) -> Values:
        """Every option's value: ``given`` (by option name, as text or values) converted as the command line
        converts its flags, the others their defaults (an environment variable first, where one is declared).

        Raises:
            UserError: a bad value or a missing required option, in the command line's words
                (``Invalid value for '--ctx': 'many' is not a number of tokens``).
        """
        out: dict[str, Any] = {}
        names = set(given)
        for info in (*((self.argument,) if self.argument else ()), *self.options):
            if info.name in given:
                try:
                    out[info.name] = convert(info, given[info.name])
                except ValueError as exc:
                    raise UserError(f"Invalid value for '{info.flag}': {exc}") from None
            elif info.envvar and os.environ.get(info.envvar):
                out[info.name] = os.environ[info.envvar]
                names.add(info.name)
            elif info.required and info is not self.argument:
                raise UserError(f"Missing option '{info.flag}'.")
            elif info.name == "workers" and info.default is None:
                out[info.name] = default_workers(self.name)
            else:
                out[info.name] = () if info.multiple and info.default is None else info.default
        return Values(out, names)


def verb(name: str) -> Verb:
    """The verb ``name`` of :data:`curate.stages.STAGES` (its family's module imported when first asked for).

    Raises:
        KeyError: not a verb made of values (``run``, ``report``, an unknown name).
    """
    spec = STAGES[name]
    if spec.filter is not None:
        from curate.verbs.filters import filter_verb

        return filter_verb(spec)
    family = f"curate.verbs.{spec.cli}"
    if importlib.util.find_spec(family) is None:  # a family of click-only commands (run, report, vocab...)
        raise KeyError(name)
    return importlib.import_module(family).VERBS[name]


def options_of(cls: type, *names: str, exclude: tuple[str, ...] = ()) -> tuple[SettingInfo, ...]:
    """The options of a config class's settings (:func:`curate.core.settings.settings_of`): all of them but
    ``exclude``, or ``names`` in that order.

    Raises:
        TypeError: a name that is no setting of ``cls`` the command line offers.
    """
    infos = {info.name: info for info in settings_of(cls)}
    unknown = [n for n in (*names, *exclude) if n not in infos]
    if unknown:
        raise TypeError(f"{cls.__name__} has no command-line setting {', '.join(unknown)}")
    return tuple(infos[n] for n in names) if names else tuple(i for i in infos.values() if i.name not in exclude)


def field_option(cls: type, name: str, **more: Any) -> SettingInfo:
    """The option of one field of ``cls`` that its declaration alone cannot make (repeatable, split at commas, read
    from an environment variable...): its flag, help and placeholder from the field, ``more`` the rest."""
    from dataclasses import replace

    from curate.core.settings import setting_info

    info = setting_info(cls, name)
    return replace(info, **{"default": None, "required": False, **more})


def inputs(required: bool = True, metavar: str | None = None) -> SettingInfo:
    """The positional argument of a verb reading records: files, folders or URLs, any number."""
    return option("inputs", help="Input records.", type=os.PathLike, multiple=True, required=required, metavar=metavar)


# ---------------------------------------------------------------------------
# Options shared by the verbs: declared once, for the command line and recipes
# ---------------------------------------------------------------------------

#: Every sharded verb's: where and how fast it runs (never what it writes), and the seed of every random choice.
EXECUTOR_OPTIONS: tuple[SettingInfo, ...] = (
    option("seed", type=int, default=0, help=SEED_HELP),
    option("workers", type=int, default=None, show_default=False,
           help="Worker processes (local) or actors (ray; default there: as many as the cluster holds)."),
    option("executor", default="local", choices=tuple(EXECUTORS), help="Where shards run: this machine, or a Ray "
                                                                       "cluster."),
    option("ray_address", metavar="ADDR", help="Ray cluster address for --executor ray (default: RAY_ADDRESS, "
                                               "else a local cluster)."),
    option("num_gpus", type=float, default=0.0, show_default=False,
           help="With --executor ray: GPUs per actor for model-holding stages (e.g. 1, or 0.5 to share)."),
    option("cpus_per_actor", type=float, help="With --executor ray: CPUs reserved per actor (default 1; more lets a "
                                              "CPU model use threads)."),
)

#: The verbs that read images: where the records' relative image paths start.
IMAGE_ROOT = option("image_root", type=os.PathLike, metavar="DIR", help=IMAGE_ROOT_HELP)

#: The image limits of the verbs that touch pixels (docs/limits.md), by option, with the
#: :class:`~curate.core.limits.ImageReading` field each sets. Unset they keep the config's defaults, which the help
#: states (written out: reading the gate's would load Pillow for ``--help``; a test keeps them equal).
IMAGE_LIMITS: tuple[SettingInfo, ...] = (
    option("max_image_bytes", size=True, metavar="SIZE",
           help="Image files or cells larger than this (bytes, or 256MiB, 2G) are errored too_large before they are "
                "read.  [default: 256MiB]"),
    option("max_image_pixels", type=int, metavar="N",
           help="Images with more pixels are errored decompression_bomb before they are decoded.  [default: 178956970]"),
    option("max_images_per_record", type=int, metavar="N",
           help=f"Records with more images are errored too_many_images before any is read.  [default: "
                f"{DEFAULT_MAX_IMAGES}]"),
)
IMAGE_LIMIT_FIELDS = {"max_image_bytes": "max_image_bytes", "max_image_pixels": "max_image_pixels",
                      "max_images_per_record": "max_images"}
#: The shared options that are no field of a config (how a verb runs; the image limits, which set other fields).
RUN_ONLY = {o.name for o in (*EXECUTOR_OPTIONS[1:], *IMAGE_LIMITS)}


def image_limits(values: Mapping[str, Any]) -> dict[str, int]:
    """The image limits given, as :class:`~curate.core.limits.ImageReading` fields (unset ones left out, so a config
    keeps its defaults)."""
    return {f: values[o] for o, f in IMAGE_LIMIT_FIELDS.items() if values.get(o) is not None}


def settings(values: Mapping[str, Any], *drop: str) -> dict[str, Any]:
    """The values that are the config's own fields (``--seed`` and ``--image-root`` too): all but :data:`RUN_ONLY`
    and ``drop`` (the argument, options the verb turns into fields itself)."""
    return {k: x for k, x in values.items() if k not in RUN_ONLY and k not in drop}


def refuse_given(values: Values, options: Iterable[SettingInfo] | Iterable[str], why: str) -> None:
    """Refuse options of another mode that were given, rather than ignore them.

    Raises:
        UserError: the first one given (on the command line or by a recipe), naming its flag and ``why``.
    """
    for o in options:
        name = o if isinstance(o, str) else o.name
        if name in values.given:
            flag = o.flag if isinstance(o, SettingInfo) else "--" + name.replace("_", "-")
            raise UserError(f"{flag} {why}; drop it")


@dataclass(frozen=True)
class ExecutorChoice:
    """The executor a verb's options chose, checked; :meth:`make` makes it when the work runs (a recipe's check
    of its steps makes none)."""

    kind: str
    workers: int
    ray_address: str | None
    options: dict[str, Any]

    def make(self) -> Any:
        """The :class:`~curate.executors.Executor` (a Ray cluster is joined or started here)."""
        from curate.executors import get_executor

        return get_executor(self.kind, workers=self.workers, ray_address=self.ray_address, **self.options)


def executor_of(values: Values, workers: int | None = None, **kw: Any) -> ExecutorChoice:
    """The executor of a verb's options (``workers``: another count than ``--workers``'s; Ray resources from
    ``--num-gpus`` / ``--cpus-per-actor``; ``kw``: the executor's own options).

    Raises:
        UserError: an option out of range, or a Ray option without ``--executor ray``.
    """
    kind, count, address = values["executor"], values["workers"] if workers is None else workers, values["ray_address"]
    v.at_least("--workers", count, 1)
    v.at_most("--workers", count, MAX_WORKERS, "each worker is a process holding its own model")
    if kind != "ray":
        refuse_given(values, ("num_gpus", "cpus_per_actor", "ray_address"), "is for --executor ray")
    v.at_least("--num-gpus", values.get("num_gpus"), 0)
    v.above("--cpus-per-actor", values.get("cpus_per_actor"), 0)
    if kind == "ray":
        kw.setdefault("num_gpus", values.get("num_gpus") or 0.0)
        if values.get("cpus_per_actor") is not None:
            kw.setdefault("num_cpus", values["cpus_per_actor"])
        if "workers" not in values.given:
            kw.setdefault("concurrency", None)  # fill the cluster unless --workers was given
            return ExecutorChoice(kind, 0, address, kw)
    return ExecutorChoice(kind, count, address, kw)


def threads_for(threads: int | None, workers: int) -> int | None:
    """torch threads per worker: --threads if given, else the cores shared among several workers."""
    v.at_least("--threads", threads, 1)
    v.at_most("--threads", threads, MAX_THREADS)
    if threads is not None or workers <= 1:
        return threads
    return max(1, (os.cpu_count() or 1) // workers)


def print_rejects(counts: Any, out: str) -> None:
    """The line with the dropped and errored records by reason (:meth:`~curate.core.stats.Counts.rejects_line`),
    when there are any."""
    from curate.core.progress import console

    if counts.rejected:
        console.print(counts.rejects_line(out))
        example = _dominant_example(counts, out)
        if example:
            console.print(example, markup=False, highlight=False)


def _dominant_example(counts: Any, out: str) -> str | None:
    """When one reason took most of the records (a whole input unusable, e.g. URLs never downloaded), the first
    such record's detail, so the user reads the cause without opening rejects.parquet."""
    from curate.core.io import is_url

    reasons = {**(counts.dropped or {}), **(counts.errored or {})}
    if not reasons or not counts.records_in or is_url(str(out)):
        return None
    reason, n = max(reasons.items(), key=lambda kv: kv[1])
    path = os.path.join(str(out), "rejects.parquet")
    if n * 2 < counts.records_in or not os.path.exists(path):
        return None
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096, columns=["id", "reason", "detail"]):
        for rid, why, detail in zip(*(batch.column(k).to_pylist() for k in ("id", "reason", "detail"))):
            if why == reason:
                return f"  {n:,} of {counts.records_in:,} records {reason}, e.g. {rid}: {detail}"[:600]
    return None
