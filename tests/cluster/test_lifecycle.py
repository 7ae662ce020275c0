"""No process outlives the control plane: not after stop(), and not when the Python process that started it
is terminated, interrupted or killed outright."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from mmrl_local.cluster.controlplane import ControlPlane
from mmrl_local.common import procs
from mmrl_local.toolchain import build

pytestmark = pytest.mark.cluster

STARTER = """
import json, sys, time
from mmrl_local.cluster.controlplane import ControlPlane
cp = ControlPlane(install_kuberay_crds=False).start()
print(json.dumps(cp.pids), flush=True)
time.sleep(600)
"""


def test_stop_leaves_no_process_behind(control_plane) -> None:
    cp = ControlPlane(binaries=build.build(), install_kuberay_crds=False).start()
    pids = cp.pids
    assert len(pids) == 5 and all(procs.pid_alive(p) for p in pids)
    cp.stop()
    assert procs.wait_gone(pids, timeout=10) == []
    assert not cp.workdir.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_no_orphans_when_the_owner_process_dies(control_plane, signum: int) -> None:
    # A shell that starts this run in the background (`.ci/run &`) hands its children SIGINT ignored, and Python then
    # never turns SIGINT into KeyboardInterrupt; the owner gets the default disposition, as in a terminal.
    owner = subprocess.Popen(
        [sys.executable, "-c", STARTER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        line = owner.stdout.readline()
        assert line, "the starter process printed no pids"
        pids = json.loads(line)
        assert all(procs.pid_alive(p) for p in pids)
        os.kill(owner.pid, signum)
        owner.wait(timeout=30)
        assert procs.wait_gone(pids, timeout=15) == []
    finally:
        if owner.poll() is None:
            owner.kill()
