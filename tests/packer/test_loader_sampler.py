"""packer.sampler: the epoch order, the split over ranks and workers, and positions from saved states."""

from __future__ import annotations

import numpy as np
import pytest

from packer.sampler import STATE_FORMAT, epoch_order, rank_positions, restore_position, worker_slots


def test_order_split_and_slots_cover_the_epoch_once() -> None:
    a, b = epoch_order(1000, shuffle=True, seed=3, epoch=1), epoch_order(1000, shuffle=True, seed=3, epoch=1)
    assert a.tolist() == b.tolist() and sorted(a.tolist()) == list(range(1000))
    assert a.tolist() != epoch_order(1000, shuffle=True, seed=3, epoch=2).tolist()
    assert epoch_order(5, shuffle=False, seed=3, epoch=9).tolist() == [0, 1, 2, 3, 4]
    for n, world, start in ((1000, 7, 0), (1000, 7, 430), (3, 8, 0)):
        ranks = [rank_positions(n, start, r, world, False) for r in range(world)]
        assert len({x.size for x in ranks}) == 1  # the same count on every rank
        covered = np.concatenate(ranks)
        assert sorted(covered.tolist()) == list(range(start, start + ranks[0].size * world))  # disjoint, in a row
        assert set((covered % n).tolist()) >= set(range(start, n))  # the rest of the epoch, repeats wrapped
        dropped = [rank_positions(n, start, r, world, True) for r in range(world)]
        assert all(x.size == (n - start) // world for x in dropped) and (np.concatenate(dropped) < n).all()
        for workers, batch in ((3, 2), (4, 1)):
            slots = [worker_slots(ranks[0].size, w, workers, batch) for w in range(workers)]
            assert sorted(np.concatenate(slots).tolist()) == list(range(ranks[0].size))


def _state(**kw: object) -> dict:
    base = {"format": STATE_FORMAT, "epoch": 2, "seed": 1, "shuffle": True, "drop_last": False, "n": 100,
            "balanced": False, "start": 10, "world": 4, "rank": 0, "workers": 2, "worker": 0, "batch_size": 2,
            "yielded": 0}
    return base | kw


def test_positions_from_loader_states() -> None:
    loader = {"_snapshot": {"_worker_snapshots": {
        "worker_0": {"dataset_state": _state(worker=0, yielded=4)},
        "worker_1": {"dataset_state": _state(worker=1, yielded=2)}}}, "_steps_since_snapshot": 1}
    # 6 sequences yielded + 1 batch of 2 after the snapshot, on each of 4 ranks, from position 10
    assert restore_position(loader)["consumed"] == 10 + 8 * 4
    assert restore_position(_state(workers=1, yielded=1000))["consumed"] == 100  # the epoch is done
    with pytest.raises(ValueError, match="not a packer.loader state"):
        restore_position({"model": 1})
    with pytest.raises(ValueError, match="1 worker states for 2 workers"):
        restore_position({"_snapshot": {"_worker_snapshots": {"worker_0": {"dataset_state": _state()}}}})
    with pytest.raises(ValueError, match="disagree on the epoch"):
        restore_position({"_snapshot": {"_worker_snapshots": {"worker_0": {"dataset_state": _state()},
                                                              "worker_1": {"dataset_state": _state(epoch=3)}}}})
