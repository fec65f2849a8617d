"""One rule for problems in a tar and in a run: the first MAX_PROBLEMS listed, every other one counted."""

from __future__ import annotations

import pytest

from packer.verify import MAX_PROBLEMS, TarReport, VerifyReport


@pytest.mark.parametrize("found", [0, 5, MAX_PROBLEMS, MAX_PROBLEMS + 1, 3 * MAX_PROBLEMS + 7])
def test_tar_and_run_reports_count_the_same(found: int) -> None:
    tar, run = TarReport(), VerifyReport()
    for k in range(found):
        tar.add(f"problem {k}")
        run.add(f"problem {k}")
    assert (tar.problems, tar.more_problems) == (run.problems, run.more_problems)
    assert tar.problem_count == run.problem_count == found
    assert len(run.problems) == min(found, MAX_PROBLEMS) and run.ok == (found == 0)


def test_a_run_adds_up_its_tars() -> None:
    tars = []
    for found in (150, 90, MAX_PROBLEMS + 40, 0):
        tar = TarReport()
        for k in range(found):
            tar.add(f"tar {len(tars)}: problem {k}")
        tars.append(tar)
    run = VerifyReport()
    for tar in tars:
        run.absorb(tar.problems, tar.more_problems)
    assert run.problem_count == sum(t.problem_count for t in tars) == 150 + 90 + MAX_PROBLEMS + 40
    assert run.problems == [p for t in tars for p in t.problems][:MAX_PROBLEMS]
    assert not run.ok
