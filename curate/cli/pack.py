"""Verbs of sequence packing: ``pack``, ``verify``, ``energon-prepare`` (packer/)."""

from __future__ import annotations

import click

from curate.cli.group import cli
from curate.cli.options import (executor_options, image_limit_options, image_limits_given, image_root_option,
                                 make_executor, print_rejects)
from curate.core import validate as v
from curate.core.errors import UserError


@cli.command("pack")
@click.argument("inputs", nargs=-1, type=click.Path(path_type=str))
@click.option("--processor", metavar="PROC", help="Processor folder or hub id used by the trainer (AutoProcessor).")
@click.option("--ctx", type=int, default=8192, show_default=True, help="Tokens per packed sequence.")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--min-pixels", type=int, default=None, help="Override the image processor's min_pixels.")
@click.option("--max-pixels", type=int, default=None, help="Override the image processor's max_pixels.")
@click.option("--verify-sample", type=int, default=1000, show_default=True,
              help="Records (seeded, spread over shards) also run through the full processor; any mismatch stops "
                   "the run. 0 turns the check off.")
@click.option("--verify-fraction", type=float, default=None,
              help="Older form: a share of every shard checked instead of --verify-sample (1% of 85M records is "
                   "850K processor runs); prefer --verify-sample.")
@click.option("--exact", is_flag=True, help="Run the full processor on every record (decodes every image; slow).")
@click.option("--lengths", type=click.Path(path_type=str), default=None,
              help="Earlier token lengths (a lengths.parquet). With INPUT: text counts of unchanged records "
                   "reused, images and new records counted, its other records ignored; without: plan them as they are.")
@click.option("--plan-only", is_flag=True, help="Write plan.parquet and stats.json only, no shards.")
@click.option("--shard-size", type=int, default=5000, show_default=True, help="Input records per counting shard.")
@click.option("--sequences-per-shard", type=int, default=256, show_default=True,
              help="Packed sequences per output tar.")
@click.option("--trust-remote-code", is_flag=True, help="Allow processors that ship their own code.")
@click.option("--energon", default=None, metavar="TRAIN,VAL,TEST",
              help="Also make OUT a Megatron-Energon dataset with this split of the shards, e.g. 1,0,0 "
                   "(see curate energon-prepare).")
@click.option("--balance-compute", is_flag=True,
              help="Lay the bins out in training steps of equal compute per data-parallel rank (needs --dp).")
@click.option("--dp", type=int, default=None, metavar="N", help="Data-parallel ranks that train on the pack.")
@click.option("--micro-batches", type=int, default=None, metavar="M",
              help="Packed sequences per rank per step (default 1).")
@click.option("--cost-model", type=click.Path(path_type=str), default=None, metavar="FILE",
              help="YAML of architecture parameters for the compute cost (default: LLaVA-OneVision-1.5-8B), or a "
                   "timing log (.csv/.parquet of measured sequences) to fit the cost to (docs/compute-balance.md).")
@click.option("--step-mix", type=int, default=None, metavar="K",
              help="Groups of similar sequences per step (default: one per micro-batch). More groups mix what a "
                   "step holds at the price of balance; must divide dp x micro-batches.")
@image_root_option
@image_limit_options
@executor_options
def pack_cmd(inputs: tuple[str, ...], out: str, verify_fraction: float | None, plan_only: bool, energon: str | None,
             workers: int, executor: str, ray_address: str | None, **settings: object) -> None:
    """Pack records into sequences of at most --ctx tokens, as WebDataset shards.

    Token counts are exact for the given processor (image tokens by the Qwen2-VL
    rule from each image's displayed size; every image proven to decode by the
    image gate, docs/images.md); samples longer than ctx are listed as too_long,
    never truncated. Outputs in OUT: shards/*.tar, lengths.parquet, plan.parquet,
    rejects.parquet, stats.json, packing.png.

    \b
    Examples:
      curate pack data/*.jsonl --processor lmms-lab/LLaVA-OneVision-1.5-8B-Instruct --ctx 8192 --out packed/
      curate pack --lengths packed/lengths.parquet --ctx 16384 --plan-only --out plan16k/
      curate pack data/*.jsonl --processor PROC --out packed/ --balance-compute --dp 64 --micro-batches 2
    """
    from packer.config import PackConfig
    from packer.pack import check_request, pack

    if verify_fraction is not None:
        from curate.core.progress import console

        console.print(f"[yellow]note:[/yellow] --verify-fraction {verify_fraction:g} checks that share of every "
                      "record with the full processor (deprecated; a fixed --verify-sample N costs the same at any "
                      "corpus size); --verify-sample is ignored")

    config = PackConfig(out=out, verify_fraction=verify_fraction, plan_only=plan_only, energon=energon,
                        workers=workers, **settings, **image_limits_given())  # type: ignore[arg-type]  (the flags are the config's fields)
    check_request(list(inputs), config)
    stats = pack(list(inputs), config, executor=make_executor(executor, workers, ray_address))
    _summary_pack(stats, out)
    if energon and not plan_only:
        from packer.energon import prepare_energon

        prepare_energon(out, split_ratio=energon, workers=workers)
        click.echo(f"energon dataset: {out} (.nv-meta/, split {energon}); check with: energon lint {out}", err=True)


def _summary_pack(stats: dict, out: str) -> None:
    from curate.core.progress import console
    from curate.core.results import from_stats
    from packer.results import PackResult

    r = from_stats(PackResult, stats)
    pr = r.padding_reduction
    console.print(f"[bold]packed[/bold] {r.records_packed:,} of {r.records_in:,} records into "
                  f"{r.bins:,} sequences (lower bound {r.lower_bound_bins:,}, "
                  f"fill {r.fill_ratio:.3f}, padding reduction {'∞' if pr is None else f'{pr:.1f}×'})")
    if r.balance:
        b = r.balance
        before, after = b["imbalance"]["token_only"], b["imbalance"]["balanced"]
        mb = b["micro_batches"]
        if b.get("calibration"):
            from packer.timing import describe_fit

            console.print(describe_fit(b["calibration"]))
        console.print(f"compute-balanced: {b['steps']:,} steps of {b['dp']} ranks x {mb} "
                      f"micro-batch{'es' if mb != 1 else ''}; step imbalance (max/mean) p99 {before['p99']:.3f} -> {after['p99']:.3f}, "
                      f"idle rank time {before['idle_fraction']:.1%} -> {after['idle_fraction']:.1%}")
        others = before["other_models"], after["other_models"]
        if others[1]["models"]:
            console.print(f"  under {others[1]['models']} other cost models (attention and vision weights x0.5 or x2): "
                          f"worst p99 {others[0]['p99_worst']:.3f} -> {others[1]['p99_worst']:.3f}")
        mix = b["composition"]
        share = [mix[k]["image_share"] for k in ("token_only", "balanced")]
        length = [mix[k]["mean_length"] for k in ("token_only", "balanced")]
        console.print(f"  what steps hold (p1-p99 over steps): image-token share {share[0]['p1']:.2f}-{share[0]['p99']:.2f} "
                      f"-> {share[1]['p1']:.2f}-{share[1]['p99']:.2f}, mean sample length {length[0]['p1']:,.0f}-"
                      f"{length[0]['p99']:,.0f} -> {length[1]['p1']:,.0f}-{length[1]['p99']:,.0f} tokens "
                      f"(--step-mix trades balance for mixed steps)")
    print_rejects(r, out)
    if r.sequences is not None:
        console.print(f"shards: {out}/shards/   plot: {out}/packing.png   stats: {out}/stats.json")
    else:
        console.print(f"plan: {out}/plan.parquet   plot: {out}/packing.png   stats: {out}/stats.json")


@cli.command("verify")
@click.argument("out", type=click.Path(path_type=str))
@click.option("--processor", metavar="PROC", default=None,
              help="Processor to recount tokens with (default: the one recorded in OUT/stats.json).")
@click.option("--sample", type=int, default=64, show_default=True, help="Records re-tokenized (seeded sample).")
@click.option("--recount-all", is_flag=True,
              help="Re-tokenize every record instead of a sample, in the shards (each worker loads the processor): "
                   "the proof that every stored count is right, at about the cost of counting again.")
@executor_options
def verify_cmd(out: str, processor: str | None, sample: int, recount_all: bool, seed: int, workers: int,
               executor: str, ray_address: str | None) -> None:
    """Check a packed folder: every shard, boundary and count against its JSON and stats.json.

    Each tar is read once (each sequence's JSON; every image through the image gate, which proves it
    decodes as the training loader will decode it and that its size gives the stored grid), in
    parallel with --workers N (or on Ray with --executor ray); a pack in a bucket is read in place.
    Exits 1 and names each inconsistency (the tar, sequence, image and sample) when anything is wrong.
    """
    from curate.core.progress import console
    from packer.config import VerifyConfig
    from packer.verify import verify_pack

    report = verify_pack(config=VerifyConfig(out=out, processor=processor, sample=sample, seed=seed,
                                             recount_all=recount_all),
                         executor=make_executor(executor, workers, ray_address))
    console.print(f"checked {report.shards} shards, {report.sequences:,} sequences, {report.records:,} records, "
                  f"{report.images:,} images; recounted {report.recounted} records with the processor")
    if not report.ok:
        for problem in report.problems:
            console.print(f"[red]✗[/red] {problem}")
        if report.more_problems:
            console.print(f"[red]✗[/red] ... {report.more_problems:,} more problems not listed")
        raise SystemExit(1)
    console.print("[green]✓[/green] all boundaries and counts consistent")


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
