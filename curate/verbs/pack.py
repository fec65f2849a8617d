"""Verbs of sequence packing as functions of values: ``pack`` and ``verify`` (packer/)."""

from __future__ import annotations

import os
import sys

from curate.core.settings import option
from curate.verbs import (EXECUTOR_OPTIONS, IMAGE_LIMITS, IMAGE_ROOT, Prepared, Values, Verb, executor_of,
                          image_limits, inputs, options_of, print_rejects, settings)
from packer.config import PackConfig, VerifyConfig


def pack(values: Values) -> Prepared:
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
    from curate.core.settings import build_config
    from packer.pack import check_request

    out, verify_fraction, energon = values["out"], values["verify_fraction"], values["energon"]
    if verify_fraction is not None:
        from curate.core.progress import console

        console.print(f"[yellow]note:[/yellow] --verify-fraction {verify_fraction:g} checks that share of every "
                      "record with the full processor (deprecated; a fixed --verify-sample N costs the same at any "
                      "corpus size); --verify-sample is ignored")
    given = {**settings(values, "inputs"), "workers": values["workers"]}
    config = build_config(PackConfig, given, **image_limits(values))  # the options are the config's fields
    records = list(values["inputs"])
    check_request(records, config)
    runner = executor_of(values, config.workers)

    def run() -> None:
        from packer.pack import pack as pack_records

        stats = pack_records(records, config, executor=runner.make())
        _summary_pack(stats, out)
        if energon and not config.plan_only:
            from packer.energon import prepare_energon

            prepare_energon(out, split_ratio=energon, workers=config.workers)
            print(f"energon dataset: {out} (.nv-meta/, split {energon}); check with: energon lint {out}",
                  file=sys.stderr)
            if config.energon_layout == "llava-ov-1.5":
                from packer.energon import write_seed_layout

                seed = write_seed_layout(out, split_ratio=energon, workers=config.workers)
                print(f"LLaVA-OneVision-1.5 layout: {seed['path']} ({seed['sequences']:,} packed samples); train "
                      "with OFFLINE_PACKED_DATA=1 (docs/energon.md)", file=sys.stderr)

    return Prepared(config, run)


def _summary_pack(stats: dict, out: str) -> None:
    from curate.core.progress import console
    from curate.core.stats import from_stats
    from curate.report.pages import padding_summary
    from packer.config import PackResult

    r = from_stats(PackResult, stats)
    console.print(f"[bold]packed[/bold] {r.records_packed:,} of {r.records_in:,} records into "
                  f"{r.bins:,} sequences (lower bound {r.lower_bound_bins:,}, "
                  f"fill {r.fill_ratio:.3f}; {padding_summary(stats, short=True)})")
    if r.balance:
        b = r.balance
        before, after = b["imbalance"]["token_only"], b["imbalance"]["balanced"]
        mb = b["micro_batches"]
        if b.get("calibration"):
            from packer.compute_balance import describe_fit

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


def verify(values: Values) -> Prepared:
    """Check a packed folder: every shard, boundary and count against its JSON and stats.json.

    Each tar is read once (each sequence's JSON; every image through the image gate, which proves it
    decodes as the training loader will decode it and that its size gives the stored grid), in
    parallel with --workers N (or on Ray with --executor ray); a pack in a bucket is read in place.
    Exits 1 and names each inconsistency (the tar, sequence, image and sample) when anything is wrong.
    """
    from curate.core.settings import build_config

    config = build_config(VerifyConfig, settings(values))
    runner = executor_of(values)

    def run() -> None:
        from curate.core.progress import console
        from packer.verify import verify_pack

        report = verify_pack(config=config, executor=runner.make())
        console.print(f"checked {report.shards} shards, {report.sequences:,} sequences, {report.records:,} records, "
                      f"{report.images:,} images; recounted {report.recounted} records with the processor")
        if not report.ok:
            for problem in report.problems:
                console.print(f"[red]✗[/red] {problem}")
            if report.more_problems:
                console.print(f"[red]✗[/red] ... {report.more_problems:,} more problems not listed")
            raise SystemExit(1)
        console.print("[green]✓[/green] all boundaries and counts consistent")

    return Prepared(config, run)


VERBS = {
    "pack": Verb("pack", inputs(required=False), (*options_of(PackConfig), IMAGE_ROOT, *IMAGE_LIMITS,
                                                  *EXECUTOR_OPTIONS), pack),
    "verify": Verb("verify", option("out", type=os.PathLike, required=True, help="A curate pack output folder."),
                   (*options_of(VerifyConfig), *EXECUTOR_OPTIONS), verify),
}
