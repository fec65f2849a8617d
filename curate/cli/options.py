"""Flags and helpers shared by the verbs: executor flags, the executor they make, open_clip model flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from curate.core import validate as v
from curate.executors import EXECUTORS
from curate.models.specs import PRECISIONS  # not .encoders: that loads numpy for a flag's choices

if TYPE_CHECKING:
    from curate.core.results import Counts


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
    fn = click.option("--workers", type=int, default=1, show_default=True,
                      help="Worker processes (local) or actors (ray; default there: as many as the cluster holds).")(fn)
    fn = click.option("--seed", type=int, default=0, show_default=True,
                      help="Seed of every random choice; the same seed gives the same outputs.")(fn)
    return fn


def make_executor(executor: str, workers: int, ray_address: str | None, **kw):  # noqa: ANN003, ANN202
    """The executor of a verb's flags (Ray resources come from --num-gpus / --cpus-per-actor).

    Raises:
        UserError: a flag out of range (checked before anything starts).
    """
    from curate.executors import get_executor

    v.at_least("--workers", workers, 1)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        v.at_least("--num-gpus", ctx.meta.get("curate.num_gpus"), 0)
        v.above("--cpus-per-actor", ctx.meta.get("curate.cpus_per_actor"), 0)
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


_MODEL_HELP = ("open_clip model: ARCH:PRETRAINED (hub tag), ARCH:/path/checkpoint.{pt,safetensors} "
               "(ARCH an open_clip name or an ARCH.json beside the file), local-dir:FOLDER or hf-hub:ORG/REPO.")


def model_options(fn):  # noqa: ANN001, ANN202 - click decorator
    """Flags shared by the verbs that run an open_clip model."""
    fn = click.option("--threads", type=int, default=None,
                      help="torch CPU threads per worker (default: cores ÷ workers; while embedding "
                           "the vocabulary, cores − 1 beside the tokenizer thread).")(fn)
    fn = click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N or mps.")(fn)
    fn = click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
                      help="Model precision; fp16 needs a GPU, bf16 is about 2× faster than fp32 on recent CPUs.")(fn)
    fn = click.option("--model", default="ViT-B-32-quickgelu:metaclip_400m", show_default=True, metavar="SPEC",
                      help=_MODEL_HELP)(fn)
    return fn


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


def _option(info):  # noqa: ANN001, ANN202 - a SettingInfo -> a click decorator
    import os

    if info.type is bool:
        if info.default:
            return click.option(f"{info.flag}/--no-{info.flag[2:]}", info.name, default=True, show_default=True,
                                help=info.help)
        return click.option(info.flag, info.name, is_flag=True, help=info.help)
    if info.choices:
        kind = click.Choice(info.choices)
    elif info.type is os.PathLike:
        kind = click.Path(path_type=str)
    else:
        kind = info.type if info.type in (int, float, str) else str
    shown = info.show_default and info.default not in (None, "")
    given = {"required": True} if info.required else {"default": info.default}  # click: a default None is a value
    return click.option(info.flag, info.name, type=kind, metavar=info.metavar, show_default=shown, help=info.help,
                        **given)


def print_rejects(counts: Counts, out: str) -> None:
    """The line with the dropped and errored records by reason (:meth:`~curate.core.results.Counts.rejects_line`),
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
    if threads is not None or workers <= 1:
        return threads
    return max(1, (os.cpu_count() or 1) // workers)
