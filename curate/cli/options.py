"""Flags and helpers shared by the verbs: executor flags, the executor they make, options made from a config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from curate.core import validate as v
from curate.core.limits import DEFAULT_MAX_IMAGES, MAX_THREADS, MAX_WORKERS
from curate.executors import EXECUTORS

if TYPE_CHECKING:
    from curate.core.stats import Counts


def _store_meta(ctx: click.Context, param: click.Parameter, value: object) -> object:
    ctx.meta[f"curate.{param.name}"] = value
    return value


def executor_options(fn):  # noqa: ANN001, ANN202 - click decorator
    """Flags shared by every sharded verb: executor, workers, Ray address and resources, seed."""
    fn = click.option("--cpus-per-actor", type=float, default=None, expose_value=False, callback=_store_meta,
                      help="With --executor ray: CPUs reserved per actor (default 1; more lets a CPU model use threads).")(fn)
    fn = click.option("--num-gpus", type=float, default=0.0, expose_value=False, callback=_store_meta,
                      help="With --executor ray: GPUs per actor for model-holding stages (e.g. 1, or 0.5 to share).")(fn)
    fn = click.option("--ray-address", default=None, metavar="ADDR",
                      help="Ray cluster address for --executor ray (default: RAY_ADDRESS, else a local cluster).")(fn)
    fn = click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
                      help="Where shards run: this machine, or a Ray cluster.")(fn)
    fn = click.option("--workers", type=int, default=_default_workers, cls=WorkersOption, show_default=False,
                      help="Worker processes (local) or actors (ray; default there: as many as the cluster holds).")(fn)
    fn = click.option("--seed", type=int, default=0, show_default=True,
                      help="Seed of every random choice; the same seed gives the same outputs.")(fn)
    return fn


def refuse_given(names: tuple[str, ...] | list[str], why: str) -> None:
    """Refuse flags of another mode that were given (``names``: parameter names), rather than ignore them.

    Raises:
        UserError: the first one given on the command line (or by a recipe), naming it and ``why``.
    """
    from curate.core.errors import UserError

    ctx = click.get_current_context()
    for name in names:
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT):
            param = next((p for p in ctx.command.params if p.name == name), None)
            flag = max(getattr(param, "opts", None) or [f"--{name.replace('_', '-')}"], key=len)
            raise UserError(f"{flag} {why}; drop it")


@dataclass(frozen=True)
class Prepared:
    """What a verb returns once its settings are built and checked: its config, and ``run``, which does the work.

    The click group runs it (:class:`curate.cli.group._ReportingCommand`); a recipe's check of its steps
    (``curate run``, ``--dry-run`` too) builds every step's ``Prepared`` and runs none.
    """

    config: Any
    run: Callable[[], None]


def make_executor(executor: str, workers: int, ray_address: str | None, **kw):  # noqa: ANN003, ANN202
    """The executor of a verb's flags (Ray resources come from --num-gpus / --cpus-per-actor).

    Every sharded verb calls it once its settings are built and checked, before any work; in a recipe's check of
    its steps (``ctx.meta["curate.check_only"]``) the flags are checked and no executor is made (None: the verb's
    :class:`Prepared` is not run).

    Raises:
        UserError: a flag out of range (checked before anything starts).
    """
    from curate.executors import get_executor

    v.at_least("--workers", workers, 1)
    v.at_most("--workers", workers, MAX_WORKERS, "each worker is a process holding its own model")
    ctx = click.get_current_context(silent=True)
    if ctx is not None and executor != "ray":
        refuse_given(("num_gpus", "cpus_per_actor", "ray_address"), "is for --executor ray")
    if ctx is not None:
        v.at_least("--num-gpus", ctx.meta.get("curate.num_gpus"), 0)
        v.above("--cpus-per-actor", ctx.meta.get("curate.cpus_per_actor"), 0)
        if ctx.meta.get("curate.check_only"):
            return None
    if executor == "ray" and ctx is not None:
        kw.setdefault("num_gpus", ctx.meta.get("curate.num_gpus") or 0.0)
        if ctx.meta.get("curate.cpus_per_actor") is not None:
            kw.setdefault("num_cpus", ctx.meta["curate.cpus_per_actor"])
        if ctx.get_parameter_source("workers") == click.core.ParameterSource.DEFAULT:
            kw.setdefault("concurrency", None)  # fill the cluster unless --workers was given
            return get_executor(executor, workers=0, ray_address=ray_address, **kw)
    return get_executor(executor, workers=workers, ray_address=ray_address, **kw)


def image_root_option(fn):  # noqa: ANN001, ANN202 - click decorator
    """``--image-root``: where the records' relative image paths start (the verbs that read images)."""
    return click.option("--image-root", type=click.Path(path_type=str), default=None, metavar="DIR",
                        help="Folder (or bucket prefix) the records' relative image paths start from, for "
                             "annotations kept apart from their images (LLaVA's --image-folder); default: "
                             "each input file's own folder.")(fn)


def _verb(ctx: click.Context | None) -> str:
    """A verb's name as :data:`curate.core.settings.WORKER_MEMORY` knows it: ``embed``, ``vocab embed``... (its
    command path less ``curate``; a recipe's step parses its verb without the group)."""
    if ctx is None:
        return ""
    path = ctx.command_path
    return path.split(" ", 1)[1] if path.startswith("curate ") else path


def _default_workers() -> int:
    from curate.core.settings import default_workers

    return default_workers(_verb(click.get_current_context(silent=True)))


class WorkersOption(click.Option):
    """``--workers``: one per available core by default; ``--help`` says what each worker holds where memory bounds
    it, and a verb's own default (:data:`curate.core.settings.WORKER_MEMORY`, declared there once)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from curate.core.settings import WORKER_MEMORY

        fixed, note = WORKER_MEMORY.get(_verb(ctx), (None, ""))
        base = self.help or ""
        default = "one per available core" if fixed is None else str(fixed)
        self.help = f"{base} Memory: {note}.  [default: {default}]" if note else f"{base}  [default: {default}]"
        try:
            return super().get_help_record(ctx)
        finally:
            self.help = base


class TokenCount(click.ParamType):
    """A number of tokens: ``8192``, ``8k`` or ``8K`` (x 1024), ``1M``
    (:func:`curate.core.settings.parse_token_count`)."""

    name = "tokens"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from curate.core.settings import parse_token_count

        try:
            return parse_token_count(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ByteSize(click.ParamType):
    """A number of bytes: ``268435456``, ``256MiB``, ``256M`` or ``1.5GB`` (K, M, G, T: powers of 1024)."""

    name = "bytes"
    _UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().replace("_", "").replace(",", "")
        number = text.rstrip("kmgtib")
        unit = text[len(number):].replace("ib", "").replace("b", "") or ""
        try:
            size = float(number) * self._UNITS[unit[:1]] if len(unit) <= 1 else -1
        except (KeyError, ValueError):
            size = -1
        if not 1 <= size < 1 << 62 or size != size:
            self.fail(f"{value!r} is not a size in bytes (e.g. 268435456, 256MiB or 2G)", param, ctx)
        return int(size)


#: The image limit flags (``--max-image-bytes``, ``--max-image-pixels``, ``--max-images-per-record``) and the
#: :class:`curate.core.limits.ImageReading` field each one sets.
IMAGE_LIMIT_FLAGS = {"max_image_bytes": "max_image_bytes", "max_image_pixels": "max_image_pixels",
                     "max_images_per_record": "max_images"}


def image_limit_options(fn):  # noqa: ANN001, ANN202 - click decorator
    """The image limits of the verbs that touch pixels (pack, embed, balance, recaption, rl-filter): one record
    costs at most ``--max-images-per-record`` reads of ``--max-image-bytes`` and decodes of ``--max-image-pixels``
    (docs/limits.md). Unset flags keep :class:`~curate.core.limits.ImageReading`'s defaults, which the
    help states (the gate's are written out: reading them would load Pillow for ``--help``; a test keeps them
    equal)."""
    fn = click.option("--max-images-per-record", type=int, default=None, expose_value=False, callback=_store_meta,
                      metavar="N", help="Records with more images are errored too_many_images before any is "
                                        f"read.  [default: {DEFAULT_MAX_IMAGES}]")(fn)
    fn = click.option("--max-image-pixels", type=int, default=None, expose_value=False, callback=_store_meta,
                      metavar="N", help="Images with more pixels are errored decompression_bomb before they are "
                                        "decoded.  [default: 178956970]")(fn)
    return click.option("--max-image-bytes", type=ByteSize(), default=None, expose_value=False, callback=_store_meta,
                        metavar="SIZE", help="Image files or cells larger than this (bytes, or 256MiB, 2G) are "
                                             "errored too_large before they are read.  [default: 256MiB]")(fn)


def image_limits_given() -> dict[str, int]:
    """The image limits given on the command line, as :class:`~curate.core.limits.ImageReading` fields
    (unset flags are left out, so a config keeps its defaults)."""
    ctx = click.get_current_context()
    given = {field: ctx.meta.get(f"curate.{flag}") for flag, field in IMAGE_LIMIT_FLAGS.items()}
    return {k: val for k, val in given.items() if val is not None}


def config_options(cls: type, *names: str, exclude: tuple[str, ...] = ()):  # noqa: ANN201 - click decorator
    """The click options of a config class's settings (:func:`curate.core.settings.settings_of`): all of them but
    ``exclude``, or ``names`` in that order. Each option's flag, type, default and help come from the config's
    field, where they are written once; the verb passes the values straight to the config."""
    from curate.core.settings import settings_of

    infos = {info.name: info for info in settings_of(cls)}
    unknown = [n for n in (*names, *exclude) if n not in infos]
    if unknown:
        raise TypeError(f"{cls.__name__} has no command-line setting {', '.join(unknown)}")
    chosen = [infos[n] for n in names] if names else [i for i in infos.values() if i.name not in exclude]

    def decorate(fn):  # noqa: ANN001, ANN202
        for info in reversed(chosen):
            fn = _option(info)(fn)
        return fn

    return decorate


def setting_option(cls: type, name: str, **click_kwargs: Any):  # noqa: ANN201 - click decorator
    """The click option of one setting of ``cls`` that :func:`config_options` cannot express: its flag, help and
    placeholder from the field (:func:`curate.core.settings.setting_info`), the rest (``multiple``, ``envvar``,
    ``callback``...) from ``click_kwargs``."""
    from curate.core.settings import setting_info

    info = setting_info(cls, name)
    return click.option(info.flag, info.name, help=info.help, metavar=info.metavar, cls=SettingOption,
                        **click_kwargs)


class SettingOption(click.Option):
    """An option made by :func:`config_options` from a config field (a test tells it from one written by hand)."""


def _option(info):  # noqa: ANN001, ANN202 - a SettingInfo -> a click decorator
    import os

    if info.type is bool:
        if info.default:
            return click.option(f"{info.flag}/--no-{info.flag[2:]}", info.name, default=True, show_default=True,
                                help=info.help, cls=SettingOption)
        return click.option(info.flag, info.name, is_flag=True, default=False, help=info.help,  # click 8.3: UNSET
                            cls=SettingOption)
    if info.choices:
        kind = click.Choice(info.choices)
    elif info.tokens:
        kind = TokenCount()
    elif info.type is os.PathLike:
        kind = click.Path(path_type=str)
    else:
        kind = info.type if info.type in (int, float, str) else str
    shown = info.show_default and info.default not in (None, "")
    given = {"required": True} if info.required else {"default": info.default}  # click: a default None is a value
    return click.option(info.flag, info.name, type=kind, metavar=info.metavar, show_default=shown, help=info.help,
                        cls=SettingOption, **given)


def print_rejects(counts: Counts, out: str) -> None:
    """The line with the dropped and errored records by reason (:meth:`~curate.core.stats.Counts.rejects_line`),
    when there are any."""
    from curate.core.progress import console

    if counts.rejected:
        console.print(counts.rejects_line(out))
        example = _dominant_example(counts, out)
        if example:
            console.print(example, markup=False, highlight=False)


def _dominant_example(counts: Counts, out: str) -> str | None:
    """When one reason took most of the records (a whole input unusable, e.g. URLs never downloaded), the first
    such record's detail, so the user reads the cause without opening rejects.parquet."""
    import os

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


def threads_for(threads: int | None, workers: int) -> int | None:
    """torch threads per worker: --threads if given, else the cores shared among several workers."""
    import os

    v.at_least("--threads", threads, 1)
    v.at_most("--threads", threads, MAX_THREADS)
    if threads is not None or workers <= 1:
        return threads
    return max(1, (os.cpu_count() or 1) // workers)
