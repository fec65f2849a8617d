"""The ``curate`` command line: one click group, one thin verb per stage.

Each verb parses its flags and calls one function that holds the logic; tests
and executors call those functions directly. This module holds the group, the
entry point and the helpers the verbs share; the verbs live in curate/commands/,
one module per role, and register themselves on ``cli`` when imported below.
"""

from __future__ import annotations

import sys

import click

from curate import __version__
from curate.errors import UserError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="curate")
def cli() -> None:
    """Prepare the training data of vision-language models.

    Stages compose through files: each reads records (JSONL, Parquet) and writes
    its outputs plus a stats.json into an output folder. Reruns resume.
    """


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``curate`` console script: user errors print one line and exit 2."""
    try:
        cli.main(args=argv, prog_name="curate", standalone_mode=False)
    except UserError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


# ---------------------------------------------------------------------------
# Helpers shared by the verbs in curate/commands/.
# ---------------------------------------------------------------------------


def _store_meta(ctx: click.Context, param: click.Parameter, value: object) -> object:
    ctx.meta[f"curate.{param.name}"] = value
    return value


def _executor_options(fn):  # noqa: ANN001, ANN202 - click decorator
    """Flags shared by every sharded verb: executor, workers, Ray address and resources, seed."""
    fn = click.option("--cpus-per-actor", type=float, default=None, expose_value=False, callback=_store_meta,
                      help="With --executor ray: CPUs reserved per actor (default 1; more lets a CPU model use threads).")(fn)
    fn = click.option("--num-gpus", type=float, default=0.0, expose_value=False, callback=_store_meta,
                      help="With --executor ray: GPUs per actor for model-holding stages (e.g. 1, or 0.5 to share).")(fn)
    fn = click.option("--ray-address", default=None, metavar="ADDR",
                      help="Ray cluster address for --executor ray (default: RAY_ADDRESS, else a local cluster).")(fn)
    fn = click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                      help="Where shards run: this machine, or a Ray cluster.")(fn)
    fn = click.option("--workers", type=int, default=1, show_default=True,
                      help="Worker processes (local) or actors (ray; default there: as many as the cluster holds).")(fn)
    fn = click.option("--seed", type=int, default=0, show_default=True,
                      help="Seed of every random choice; the same seed gives the same outputs.")(fn)
    return fn


def _make_executor(executor: str, workers: int, ray_address: str | None, **kw):  # noqa: ANN003, ANN202
    """The executor of a verb's flags (Ray resources come from --num-gpus / --cpus-per-actor)."""
    from curate.executors import get_executor

    ctx = click.get_current_context(silent=True)
    if executor == "ray" and ctx is not None:
        kw.setdefault("num_gpus", ctx.meta.get("curate.num_gpus") or 0.0)
        if ctx.meta.get("curate.cpus_per_actor") is not None:
            kw.setdefault("num_cpus", ctx.meta["curate.cpus_per_actor"])
        if ctx.get_parameter_source("workers") == click.core.ParameterSource.DEFAULT:
            kw.setdefault("concurrency", None)  # fill the cluster unless --workers was given
            return get_executor(executor, workers=0, ray_address=ray_address, **kw)
    return get_executor(executor, workers=workers, ray_address=ray_address, **kw)


_MODEL_HELP = ("open_clip model: ARCH:PRETRAINED (hub tag), ARCH:/path/checkpoint.{pt,safetensors} "
               "(ARCH an open_clip name or an ARCH.json beside the file), local-dir:FOLDER or hf-hub:ORG/REPO.")


def _model_options(fn):  # noqa: ANN001, ANN202 - click decorator
    """Flags shared by the verbs that run an open_clip model."""
    fn = click.option("--threads", type=int, default=None,
                      help="torch CPU threads per worker (default: cores ÷ workers; while embedding "
                           "the vocabulary, cores − 1 beside the tokenizer thread).")(fn)
    fn = click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N or mps.")(fn)
    fn = click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
                      help="Model precision; fp16 needs a GPU, bf16 is about 2× faster than fp32 on recent CPUs.")(fn)
    fn = click.option("--model", default="ViT-B-32-quickgelu:metaclip_400m", show_default=True, metavar="SPEC",
                      help=_MODEL_HELP)(fn)
    return fn


def _threads_for(threads: int | None, workers: int) -> int | None:
    """torch threads per worker: --threads if given, else the cores shared among several workers."""
    import os

    if threads is not None or workers <= 1:
        return threads
    return max(1, (os.cpu_count() or 1) // workers)


# Register the verbs (each module adds its commands to ``cli``); keep this last.
from curate.commands import balance, pack, recaption, rl, vocab  # noqa: E402, F401
