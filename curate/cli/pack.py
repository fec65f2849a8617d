"""``energon-prepare`` (packer/energon.py), the packing family's one command that is not a verb of values (``pack``
and ``verify`` are made from curate/verbs/pack.py by the group)."""

from __future__ import annotations

import click

from curate.cli.group import cli
from curate.core import validate as v
from curate.core.errors import UserError


@cli.command("energon-prepare")
@click.argument("out", type=click.Path(path_type=str))
@click.option("--split-ratio", default="1,0,0", show_default=True, metavar="TRAIN,VAL,TEST",
              help="Weights of the train/val/test splits; whole shards are assigned, in shard order.")
@click.option("--workers", type=int, default=1, show_default=True, help="Processes indexing the tars.")
def energon_prepare_cmd(out: str, split_ratio: str, workers: int) -> None:
    """Make a curate pack output folder a Megatron-Energon dataset (writes OUT/.nv-meta/).

    Runs Energon's own preparation on OUT/shards/*.tar (index, .info.json, split.yaml)
    and writes a dataset.yaml + sample_loader.py that load each packed sequence as
    one packer.energon.PackedSequenceSample; train with packer.energon.PackedTaskEncoder.
    Rerunning rewrites the metadata.

    \b
    Examples:
      curate energon-prepare packed/
      curate energon-prepare packed/ --split-ratio 98,1,1
      energon lint packed/ --split-parts train
    """
    from curate.core.progress import console

    try:
        from packer.energon import prepare_energon
    except ImportError as exc:
        raise UserError(f"energon-prepare needs megatron-energon ({exc}); install it: pip install 'curate[energon]'") from None
    v.at_least("--workers", workers, 1)
    r = prepare_energon(out, split_ratio=split_ratio, workers=workers)
    splits = ", ".join(f"{k}: {' '.join(v) or '-'}" for k, v in r["splits"].items())
    console.print(f"[bold]energon dataset[/bold] {r['path']}: {r['sequences']:,} packed sequences in {r['shards']} "
                  f"shards ({splits})")
    console.print(f"metadata: {r['path']}/.nv-meta/ ({', '.join(r['files'])})")
