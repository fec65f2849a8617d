"""The code sandbox's host side: refusal without bubblewrap, --trust-code, the operator's limits, the work area,
and the escape table against the sandbox with its audit hook (and, as a control, without any sandbox)."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from curate.core.errors import UserError
from curate.rewards.registry import score, score_many
from curate.rewards.runtime import limits, sandbox
from curate.rewards.runtime.box.runner import wipe
from curate.rewards.runtime.sandbox import CodeSandbox

from .escapes import ATTACKS, CONTROL, SECRET_VAR, make_target, needs_bwrap, response

MISSING = "/nonexistent/curate-test/bwrap"
RECORD = {"id": "c", "answer": json.dumps({"tests": [{"input": "3", "output": "6"}]}), "answer_type": "general-code"}
RIGHT = "<answer>print(int(input()) * 2)</answer>"


@pytest.fixture
def use():
    """Run one test under given sandbox settings, then go back to the environment's."""
    def configure(**kw) -> CodeSandbox:
        settings = CodeSandbox.from_env(**kw)
        sandbox.configure(settings)
        return settings

    yield configure
    sandbox.configure(CodeSandbox.from_env())


def test_code_is_refused_without_a_sandbox(use, capsys: pytest.CaptureFixture) -> None:
    """Independent of bubblewrap being installed: the sandbox points at a program that does not exist."""
    settings = use(bwrap=MISSING)
    kind, why = sandbox.status(settings)
    assert kind == "unavailable" and "not found" in why
    results = score_many([(RECORD, RIGHT), (RECORD, "<answer>print(7)</answer>")])
    assert [(r.accuracy, r.reward, r.error) for r in results] == [(0.0, 0.0, "sandbox_unavailable")] * 2
    assert score({"answer": "7", "answer_type": "number"}, "<answer>7</answer>").accuracy == 1.0  # others still score
    line = sandbox.announce(settings)
    assert line is not None and "sandbox_unavailable" in line and "apt-get install bubblewrap" in line
    assert sandbox.announce(settings) is None  # once per process
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--trust-code" in err
    assert settings.identity()["sandbox"] == "unavailable"


def test_trusted_code_runs_without_a_sandbox_and_says_so(use, capsys: pytest.CaptureFixture) -> None:
    settings = use(bwrap=MISSING, trust_code=True)
    assert score(RECORD, RIGHT).accuracy == 1.0 and score(RECORD, "<answer>print(5)</answer>").accuracy == 0.0
    assert sandbox.announce(settings) is not None and "WITHOUT a sandbox" in capsys.readouterr().err
    assert settings.identity()["trust_code"] is True and settings.identity()["sandbox"] == "none (trusted)"


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURATE_CODE_CPU_SECONDS", "2.5")
    monkeypatch.setenv("CURATE_TRUST_CODE", "1")
    monkeypatch.setenv("CURATE_BWRAP", MISSING)
    settings = CodeSandbox.from_env(memory_mb=300)
    assert (settings.cpu_seconds, settings.memory_mb, settings.trust_code, settings.bwrap) == (2.5, 300, True, MISSING)
    assert CodeSandbox.from_env(**{"trust_code": None}).trust_code is True
    for name, value in sandbox.environ(settings).items():
        monkeypatch.setenv(name, value)
    assert CodeSandbox.from_env() == settings
    monkeypatch.setenv("CURATE_CODE_MEMORY_MB", "lots")
    with pytest.raises(UserError, match="CURATE_CODE_MEMORY_MB"):
        CodeSandbox.from_env()
    with pytest.raises(UserError, match="--code-wall-seconds"):
        CodeSandbox(wall_seconds=0)


def test_record_parameters_only_lower_the_limits() -> None:
    ceilings = CodeSandbox(cpu_seconds=2, wall_seconds=4, memory_mb=256)
    assert sandbox.job_limits({}, ceilings, "r") == (2, 4, 256)
    assert sandbox.job_limits({"cpu_seconds": 60, "wall_seconds": 120, "memory_mb": 8192}, ceilings, "r") == (2, 4, 256)
    assert sandbox.job_limits({"cpu_seconds": 0.5, "wall_seconds": 1, "memory_mb": 128}, ceilings, "r") == (0.5, 1, 128)
    with pytest.raises(ValueError, match="record 'x': reward parameter memory_mb"):
        sandbox.job_limits({"memory_mb": "inf"}, ceilings, "record 'x'")


def test_the_work_area_is_emptied_whatever_a_program_left(tmp_path: Path) -> None:
    box = tmp_path / "box"
    deep = box / "w"
    deep.mkdir(parents=True)
    os.chdir(deep)
    try:
        for _ in range(1500):  # deeper than a path can name in one string
            os.mkdir("d")
            os.chdir("d")
            Path("f").write_text("x")
        os.symlink("/etc/passwd", "link")
    finally:
        os.chdir(tmp_path)
    locked = box / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "file").write_text("x")
    os.chmod(locked / "inner", 0)
    os.chmod(locked, stat.S_IXUSR)
    (box / ".wipe1").write_text("a name the wiper uses")
    (box / ".wipe2").mkdir()
    (box / "w" / "d" / ".wipe3").mkdir()
    os.chmod(box, 0)
    wipe(str(box))
    assert os.listdir(box) == []
    assert os.path.exists("/etc/passwd")


@needs_bwrap
def test_escape_table_against_the_sandbox_with_its_audit_hook(use, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The default configuration (bubblewrap, seccomp and the audit hook), in this process: every attack fails."""
    target = make_target(tmp_path / "target")
    monkeypatch.setenv(SECRET_VAR, target.secret)
    use(audit_hook=True)
    before = limits.pool_size()
    limits.configure(workers=1)  # one sandbox: the program that plants runs right before the one that looks
    try:
        results = score_many([(target.record(a), response(a)) for a in ATTACKS])
    finally:
        limits.configure(workers=before)
    won = {a.name: r for a, r in zip(ATTACKS, results) if r.accuracy > 0}
    assert won == {}
    assert os.listdir(target.watch) == [] and target.accepted == []


def test_control_attacks_win_without_a_sandbox(use, tmp_path: Path) -> None:
    """The table can fail: with --trust-code, no bubblewrap and no audit hook, the file attacks succeed."""
    target = make_target(tmp_path / "target")
    use(bwrap=MISSING, trust_code=True, audit_hook=False)
    chosen = [a for a in ATTACKS if a.name in CONTROL]
    results = score_many([(target.record(a), response(a)) for a in chosen])
    assert {a.name: r.accuracy for a, r in zip(chosen, results)} == {name: 1.0 for name in CONTROL}
    assert os.listdir(target.watch)  # and wrote outside its folder


@needs_bwrap
def test_a_job_survives_the_end_of_the_thread_that_started_its_sandbox(use) -> None:
    """serve-rewards warms its sandboxes up on a background thread, refills them on short-lived threads and starts
    them on request threads that end when idle. Such a thread ending while its sandbox runs a job (here 0.5 s into
    a 1.5 s program) once killed the sandbox: the job, whole, scored ``verifier_crashed`` (under load, often)."""
    use()
    before = limits.pool_size()
    limits.configure(workers=1)
    sandbox.shutdown()  # a fresh pool: its one sandbox is started by the thread below
    warmed, release = threading.Event(), threading.Event()

    def warm_then_end() -> None:
        sandbox.get_pool().warm_up(wait=True)
        warmed.set()
        release.wait(30)

    starter = threading.Thread(target=warm_then_end)
    starter.start()
    try:
        assert warmed.wait(60)
        pool = sandbox.get_pool()
        threading.Timer(0.5, release.set).start()
        result = score(RECORD, "<answer>import time\ntime.sleep(1.5)\nprint(int(input()) * 2)</answer>")
        starter.join()
        assert (result.accuracy, result.error) == (1.0, None)
        assert (pool.counts["crashes"], pool.counts["restarts"]) == (0, 0)
    finally:
        release.set()
        starter.join()
        limits.configure(workers=before)
        sandbox.shutdown()
