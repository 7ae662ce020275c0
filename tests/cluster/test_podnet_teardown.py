"""A run's pod network goes with it even when something fails on the way: the reaper survives a release that
raises (the error is logged, the next pass removes the namespace), and ``close()`` removes whatever is still named
after the run, also a namespace whose bookkeeping was lost. Before, one ``ProcessLookupError`` in a release killed
the reaper silently, and the namespace and veth outlived ``make test``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmrl_local.network import podnet
from tests.cluster.test_podnet import names_on_host, plain_pod, running, spawn
from tests.support.polling import wait_until

pytestmark = pytest.mark.cluster


def started_in(box: podnet.Sandbox, proc) -> None:
    """Wait until the pod's process is in its namespace: its launcher is a Python process that joins it once it has
    started, which on a loaded machine takes seconds; a namespace removed before then holds no process to stop."""
    wait_until(lambda: proc.pid in podnet.netns_pids(box.netns), 60, what="the pod's process to join its namespace")


@pytest.fixture
def own_network(control_plane, pod_network, api_client, tmp_path: Path) -> Iterator[podnet.PodNetwork]:
    """A run's pod network of its own (the session's is shared), with its reaper polling fast."""
    network = podnet.PodNetwork(("127.0.0.1", control_plane.api_port), tmp_path / "net", poll=0.2, grace=1.0)
    network.start().watch(api_client)
    yield network
    network.close()
    assert network.run not in names_on_host()


def test_the_reaper_survives_a_release_that_raises_and_removes_the_namespace_next_pass(
    own_network, core, namespace, hyperpod_nodes, tmp_path, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.ERROR, logger="mmrl_local.common.loops")
    pod = running(core, namespace, plain_pod("flaky", hyperpod_nodes.cpu()))
    box = own_network.sandbox(pod)
    sleeper = spawn(pod, box, ["sleep", "600"], tmp_path, "sleeper")
    started_in(box, sleeper)
    unplumb, calls = own_network._unplumb, []

    def fails_once(sandbox: podnet.Sandbox) -> None:
        calls.append(sandbox.netns)
        if len(calls) == 1:  # what killed the reaper: a process that exited while its /proc/<pid>/stat was read
            raise ProcessLookupError(3, "No such process")
        unplumb(sandbox)

    monkeypatch.setattr(own_network, "_unplumb", fails_once)
    core.delete_namespaced_pod("flaky", namespace, grace_period_seconds=0)
    wait_until(lambda: box.netns not in names_on_host(), 30, what="the namespace to go on a later pass")
    assert calls == [box.netns, box.netns]
    assert own_network._reaper is not None and own_network._reaper.is_alive()
    wait_until(lambda: sleeper.poll() is not None, 10, what="the pod's process to be stopped")
    [record] = [r for r in caplog.records if r.name == "mmrl_local.common.loops"]
    assert "pod-network reaper" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], ProcessLookupError)


def test_close_removes_a_namespace_whose_bookkeeping_was_lost(
    own_network, core, namespace, hyperpod_nodes, tmp_path
) -> None:
    pod = running(core, namespace, plain_pod("forgotten", hyperpod_nodes.cpu()))
    box = own_network.sandbox(pod)
    sleeper = spawn(pod, box, ["sleep", "600"], tmp_path, "sleeper")
    started_in(box, sleeper)
    with own_network._lock:
        own_network._sandboxes.clear()  # as a release that failed half-way left it before
    assert box.netns in names_on_host()
    own_network.close()
    on_host = names_on_host()
    assert box.netns not in on_host and box.host_veth not in on_host and own_network.bridge not in on_host
    wait_until(lambda: sleeper.poll() is not None, 10, what="the pod's process to be stopped")
