"""The figures of ``curate dedup``'s ``stats.json`` beyond every stage's counts: copies by kind, benchmark overlap."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from curate.core.stats import StageStats
from curate.dedup.decide import BENCHMARK, EXACT, NEAR, SEMANTIC, Decision, Hashed


def summary(records: Hashed, decision: Decision, refs: Hashed | None, ref_stats: StageStats | None,
            pairs: dict[str, int]) -> dict[str, Any]:
    """``duplicates`` (removed records by kind; kept records that had copies), ``near_bits`` (removed near
    duplicates by distance), ``pairs`` (candidate pairs found) and, with references, ``benchmark_overlap``."""
    step = decision.step
    how = decision.how
    exact = np.flatnonzero(step == EXACT).tolist()
    by_copy = np.flatnonzero((step >= 0) & ~decision.of_ref)
    near = np.flatnonzero(step == NEAR)
    result: dict[str, Any] = {
        "duplicates": {
            "exact_same_bytes": sum(how[r] == "same bytes" for r in exact),
            "exact_same_pixels": sum(how[r] != "same bytes" for r in exact),
            "near": int(len(near)), "semantic": int(np.count_nonzero(step == SEMANTIC)),
            "kept_with_copies": int(len(np.unique(decision.of_row[by_copy]))),
        },
        "near_bits": {str(k): v for k, v in sorted(Counter(decision.distance[near].astype(int).tolist()).items())},
        "pairs": dict(sorted(pairs.items())),
    }
    if refs is not None:
        hits = np.flatnonzero(step == BENCHMARK)
        sources = records.sources.to_pylist()
        benches = refs.sources.to_pylist()
        refs_counts = ref_stats.to_dict() if ref_stats is not None else {}
        result["benchmark_overlap"] = {
            "records": int(len(hits)),
            "by_benchmark": dict(sorted(Counter(benches[int(decision.of_row[r])] for r in hits.tolist()).items())),
            "by_source": dict(sorted(Counter(sources[r] for r in hits.tolist()).items())),
            "by_match": dict(sorted(Counter(how[r].split(" ")[0] for r in hits.tolist()).items())),
            "references": {"records_in": refs_counts.get("records_in", 0),
                           "hashed": int(np.count_nonzero(refs.images > 0)),
                           "errored": refs_counts.get("errored", {}),
                           "per_benchmark": dict(sorted(Counter(benches).items()))},
        }
    return result
