"""The fork server the test session starts operators from: each child must be indistinguishable, from outside, from a
process started with `python -m` (argv, environment, log, session, exit status, killpg), and nothing it forked may
outlive it. Real processes, no cluster."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmrl_local.addons.operator_process import PREIMPORT
from mmrl_local.common import procs
from mmrl_local.common.forkserver import ForkServer
from tests.support.polling import wait_until

CHILD = "tests.support.forkchild"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    work = tmp_path_factory.mktemp("fork")
    started = ForkServer(["json"], work / "s.sock", work / "server.log").start()
    started.ready()
    yield started
    started.stop()


def test_a_child_gets_its_own_argv_environment_log_and_session(server: ForkServer, tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    child = server.spawn(CHILD, ["3"], {"FORKCHILD": "mine"}, log)
    assert child.wait(30) == 3
    assert log.read_text().strip() == "argv=['3'] name=__main__ sid=True mark=mine"
    assert child.poll() == 3


def test_killpg_stops_a_child_and_its_status_says_by_which_signal(server: ForkServer, tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    child = server.spawn(CHILD, ["sleep"], {}, log)
    wait_until(lambda: log.exists() and "argv" in log.read_text(), 30, what="the child to start")
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.1)
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(30) == -signal.SIGKILL


def test_a_child_that_raises_prints_its_traceback_and_exits_1(server: ForkServer, tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    child = server.spawn("tests.support.no_such_module", [], {}, log)
    assert child.wait(30) == 1
    assert "No module named tests.support.no_such_module" in log.read_text()


def test_stopping_the_server_stops_every_child_it_forked(tmp_path: Path) -> None:
    server = ForkServer(["json"], tmp_path / "s.sock", tmp_path / "server.log").start()
    child = server.spawn(CHILD, ["sleep"], {}, tmp_path / "child.log")
    assert procs.pid_alive(child.pid)
    server.stop()
    assert child.wait(30) == -signal.SIGKILL
    assert procs.wait_gone([child.pid]) == []
    assert not (tmp_path / "s.sock").exists()


def test_the_operator_imports_start_no_threads_so_forking_them_is_safe(tmp_path: Path) -> None:
    """The server refuses to serve when its imports started a thread; this one serves, so they started none."""
    server = ForkServer(PREIMPORT, tmp_path / "s.sock", tmp_path / "server.log").start()
    try:
        server.ready()
        child = server.spawn(CHILD, ["0"], {}, tmp_path / "child.log")
        assert child.wait(30) == 0
    finally:
        server.stop()


def test_a_child_reads_the_kubernetes_clients_kubeconfig_path_from_its_own_environment(tmp_path: Path) -> None:
    """The client computes its default kubeconfig path when imported (kopf's login uses it): a child of a server
    that imported the client with no KUBECONFIG must still talk to the cluster its own KUBECONFIG names."""
    server = ForkServer(["kubernetes.config"], tmp_path / "s.sock", tmp_path / "server.log")
    server.start()
    try:
        log = tmp_path / "child.log"
        child = server.spawn(CHILD, ["0"], {"KUBECONFIG": "/run/mine.kubeconfig"}, log)
        assert child.wait(30) == 0
        assert "kubeconfig=/run/mine.kubeconfig" in log.read_text().splitlines()
    finally:
        server.stop()


def test_a_server_whose_imports_start_threads_refuses_to_serve(tmp_path: Path) -> None:
    server = ForkServer(["tests.support.forkchild_threads"], tmp_path / "s.sock", tmp_path / "server.log").start()
    with pytest.raises(RuntimeError, match="forking this process would not be safe"):
        server.ready()
    server.stop()


def test_a_server_forks_only_for_its_own_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child shows the kernel the server's environment, run mark included (the leftovers check reads it there):
    a request that carries another run's mark is refused, one with the server's own (or none) is served."""
    monkeypatch.setenv(procs.RUN_MARK, "this-run")
    server = ForkServer(["json"], tmp_path / "s.sock", tmp_path / "server.log").start()
    try:
        with pytest.raises(RuntimeError, match=f"{procs.RUN_MARK}=another-run and this server belongs to the run"):
            server.spawn(CHILD, ["0"], {procs.RUN_MARK: "another-run"}, tmp_path / "refused.log")
        assert not (tmp_path / "refused.log").exists()
        for env in ({procs.RUN_MARK: "this-run"}, {}):
            assert server.spawn(CHILD, ["0"], env, tmp_path / "child.log").wait(30) == 0
    finally:
        server.stop()
