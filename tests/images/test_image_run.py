"""Containers run from a built image leave nothing behind: the working containers of a process that died before it
removed them are dropped by the next one (``image_run.remove_stale``), and those of live processes stay; and each
carries its run's mark, so the leftovers check would find it."""

from __future__ import annotations

import json
import os
import subprocess

from mmrl_local.common import procs
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


def test_a_container_carries_the_runs_mark_beside_its_images_env(monkeypatch) -> None:
    """The run's mark reaches a container run from an image (the image's env replaces the starter's), and the
    image's own env is still there: the leftovers check finds the containers a run left."""
    image = images_build.build_operator(verbose=False).image
    monkeypatch.setenv(procs.RUN_MARK, "this-run")
    done = image_run.run(image, command=["python", "-c", "import json, os; print(json.dumps(dict(os.environ)))"])
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout)
    assert env[procs.RUN_MARK] == "this-run"
    image_env = image_run.image_env(image_run.image_config(images_build.storage(), image))
    assert image_env and {k: env.get(k) for k in image_env} == image_env
