"""The helper process of curate.core.sidecar: a real child interpreter, its imports, its answers and its failures."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from curate.core.sidecar import Sidecar, SidecarError

PROBE = '''
import sys

def loaded(name):
    return name in sys.modules

def pid_and_file():
    import os
    return os.getpid(), __file__
'''


def test_the_call_runs_in_another_process_on_the_parents_path(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sidecar_probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))  # on this process's sys.path only, not in PYTHONPATH
    with Sidecar("sidecar_probe") as helper:
        helper.call("pid_and_file")
        pid, where = helper.result()
    assert pid != os.getpid() and Path(where) == tmp_path / "sidecar_probe.py"


def test_preloaded_modules_are_imported_before_the_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sidecar_probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with Sidecar("sidecar_probe", ("colorsys",)) as helper:
        helper.call("loaded", "colorsys")
        assert helper.result() is True
    with Sidecar("sidecar_probe") as helper:
        helper.call("loaded", "colorsys")
        assert helper.result() is False


def test_the_working_folder_is_not_on_the_childs_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "only_in_cwd.py").write_text("def f():\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    with Sidecar("only_in_cwd") as helper:
        helper.call("f")
        with pytest.raises(SidecarError, match="ModuleNotFoundError: No module named 'only_in_cwd'"):
            helper.result()


def test_an_argument_larger_than_the_pipe_comes_through() -> None:
    with Sidecar("builtins") as helper:
        helper.call("len", b"x" * 10_000_000)
        assert helper.result() == 10_000_000


@pytest.mark.parametrize("module, preload, function, args, match", [
    ("math", (), "sqrt", (-1,), r"^ValueError: math domain error$"),
    ("math", ("no_such_module_here",), "sqrt", (4,), r"^ModuleNotFoundError: No module named 'no_such_module_here'$"),
    ("os", (), "_exit", (3,), r"^the os helper process ended with exit status 3 and no answer$"),
    ("os", (), "abort", (), r"exit status -6 and no answer"),
    ("sys", (), "exit", ("it went wrong",), r"exit status 1 and no answer: it went wrong$"),
])
def test_failures_come_back_as_one_line(module: str, preload: tuple[str, ...], function: str, args: tuple,
                                        match: str) -> None:
    with Sidecar(module, preload) as helper:
        helper.call(function, *args)
        with pytest.raises(SidecarError, match=match):
            helper.result()


def test_a_helper_never_called_is_ended_on_close() -> None:
    helper = Sidecar("colorsys")
    pid = helper._proc.pid
    helper.close()
    with pytest.raises(ProcessLookupError):  # ended and reaped
        os.kill(pid, 0)


def test_one_call_per_helper() -> None:
    with Sidecar("math") as helper:
        with pytest.raises(RuntimeError, match="result\\(\\) before call\\(\\)"):
            helper.result()
        helper.call("sqrt", 9)
        with pytest.raises(RuntimeError, match="one call"):
            helper.call("sqrt", 16)
        assert helper.result() == 3.0


def test_without_child_processes_the_call_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("no processes")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    t0 = time.perf_counter()
    with Sidecar("os") as helper:
        helper.call("getpid")
        assert helper.result() == os.getpid()
    assert time.perf_counter() - t0 < 5
