"""Containers run from a built image leave nothing behind: the working containers of a process that died before it
removed them are dropped by the next one (``image_run.remove_stale``), and those of live processes stay."""

from __future__ import annotations

import json
import os
import subprocess

from mmrl_local.node import image_run
from mmrl_local.toolchain import images_build


def test_working_containers_of_dead_processes_are_removed_and_live_ones_kept() -> None:
    image = images_build.build_operator(verbose=False).image
    store = images_build.storage()
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead, live = f"mmrl-test-{gone.pid}-0", f"mmrl-test-{os.getpid()}-0"
    for name in (dead, live):
        subprocess.run(store.cmd("from", "--pull=never", "--name", name, image), check=True, capture_output=True)
    try:
        image_run.remove_stale.cache_clear()
        removed = image_run.remove_stale(store)
        listed = subprocess.run(store.cmd("containers", "--json"), capture_output=True, text=True, check=True)
        names = {c["containername"] for c in json.loads(listed.stdout or "[]")}
        assert dead in removed and dead not in names
        assert live not in removed and live in names
    finally:
        subprocess.run(store.cmd("rm", dead, live), capture_output=True)
