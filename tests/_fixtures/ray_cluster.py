"""Module fixtures: real Ray clusters for the tests of ``--executor ray``.

* ``ray_cluster``: a local 2-CPU Ray cluster in this process (one node), started before the module's
  first test and stopped after its last;
* ``ray_two_nodes``: two Ray nodes started on this machine as on two machines (``ray start --head`` and
  ``ray start --address``), one CPU each, each with its own temp folder and its own ``CURATE_CACHE``,
  that share nothing but the S3 server: each node runs inside bubblewrap with the driver's folders
  (its cache, its local inputs and outputs) and the other node's folders hidden (an empty tmpfs over
  them), so a shard that reached for the driver's disk would fail. Both nodes are stopped, and every
  process they started ended by its id, when the module ends (or fails).

Both are skipped when Ray is not installed; ``ray_two_nodes`` also when bubblewrap cannot run here.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: Environment of the nodes and of the drivers that join them (no token authentication on a test cluster).
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A local 2-CPU Ray cluster for this module; yields its address (for subprocess drivers)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pids_with(marker: str) -> list[int]:
    """This machine's processes whose environment holds ``marker`` (every process a node started inherits it)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@dataclass
class Node:
    """One ``ray start --block`` of the test cluster, in its own folder."""

    name: str
    folder: Path
    proc: subprocess.Popen
    marker: str
    log: Path

    @property
    def cache(self) -> Path:
        """The node's ``CURATE_CACHE``."""
        return self.folder / "cache"

    def stop(self, grace: float = 5.0) -> None:
        """Stop the node (SIGTERM, then SIGKILL), and end every process it started, by id."""
        pids = _pids_with(self.marker)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and (pids := _pids_with(self.marker)):
                time.sleep(0.2)
            if not pids:
                break
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class TwoNodes:
    """The two-node cluster: ``address`` to join, the head and the worker node, the driver's hidden folder."""

    address: str
    head: Node
    worker: Node
    driver: Path  #: the driver's own folder (its cache, local inputs and outputs): hidden from both nodes
    env: dict[str, str] = field(default_factory=dict)  #: what a driver process needs to join


def _bwrap_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/mnt", "true"], capture_output=True)
    return probe.returncode == 0


def _start(name: str, folder: Path, hidden: list[Path], ports: dict[str, int], head: bool,
           env: dict[str, str]) -> Node:
    (folder / "cache").mkdir(parents=True)
    (folder / "tmp").mkdir()
    marker = f"CURATE_TEST_RAY_NODE={uuid.uuid4().hex}"
    ray = str(Path(sys.executable).with_name("ray"))
    args = [ray, "start", "--block", "--disable-usage-stats", "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
            "--temp-dir", str(folder / "tmp"), "--object-store-memory", str(80 << 20),
            "--dashboard-agent-listen-port", str(_free_port()), "--dashboard-agent-grpc-port", str(_free_port()),
            "--metrics-export-port", str(_free_port()), "--runtime-env-agent-port", str(_free_port())]
    if head:
        args += ["--head", "--port", str(ports["gcs"]), "--include-dashboard=false",
                 "--dashboard-port", str(_free_port()), "--ray-client-server-port", str(_free_port())]
    else:
        args += ["--address", f"127.0.0.1:{ports['gcs']}"]
    sandbox = ["bwrap", "--dev-bind", "/", "/"] + [a for p in hidden for a in ("--tmpfs", str(p))]
    key, _, value = marker.partition("=")
    node_env = {**env, "CURATE_CACHE": str(folder / "cache"), "TMPDIR": str(folder / "tmp"), key: value}
    log = folder / "ray-start.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([*sandbox, *args], env=node_env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return Node(name, folder, proc, marker, log)


def _wait_for(what: str, check, timeout: float, nodes: list[Node]) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        dead = [n for n in nodes if n.proc.poll() is not None]
        if dead:
            raise RuntimeError(f"ray node {dead[0].name} exited: {dead[0].log.read_text()[-2000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def ray_two_nodes(tmp_path_factory: pytest.TempPathFactory, s3_server: str) -> Iterator[TwoNodes]:
    """Two Ray nodes on this machine that share nothing but the S3 server (see the module docstring).

    The driver (this process, or a ``python -m curate`` started with :attr:`TwoNodes.env`) keeps its
    local files under :attr:`TwoNodes.driver`; this process is connected to the cluster while the
    module runs.
    """
    ray = pytest.importorskip("ray")
    if not _bwrap_works():
        pytest.skip("bubblewrap cannot run here: the nodes could not be kept from the driver's folders")
    if ray.is_initialized():
        ray.shutdown()
    root = Path(tempfile.mkdtemp(prefix="rn-", dir="/tmp"))  # short: Ray's socket paths live under --temp-dir
    driver = tmp_path_factory.mktemp("ray-driver")
    (driver / "cache").mkdir()
    ports = {"gcs": _free_port()}
    env = {**os.environ, **RAY_ENV}
    env.pop("RAY_ADDRESS", None)
    hidden_from = {"head": [driver, Path(os.environ.get("CURATE_CACHE", driver)), root / "w"],
                   "worker": [driver, Path(os.environ.get("CURATE_CACHE", driver)), root / "h"]}
    (root / "h").mkdir()
    (root / "w").mkdir()
    nodes: list[Node] = []
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    try:
        os.environ.update(RAY_ENV)
        head = _start("head", root / "h", hidden_from["head"], ports, True, env)
        nodes.append(head)

        def gcs_up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", ports["gcs"]), timeout=1):
                    return True
            except OSError:
                return False

        _wait_for("the head node", gcs_up, 120, nodes)
        worker = _start("worker", root / "w", hidden_from["worker"], ports, False, env)
        nodes.append(worker)
        address = f"127.0.0.1:{ports['gcs']}"
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        _wait_for("two nodes", lambda: sum(n["Alive"] for n in ray.nodes()) == 2, 120, nodes)
        yield TwoNodes(address, head, worker, driver,
                       env={**RAY_ENV, "CURATE_CACHE": str(driver / "cache"), "RAY_ADDRESS": address})
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for node in reversed(nodes):
            node.stop()
        shutil.rmtree(root, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
