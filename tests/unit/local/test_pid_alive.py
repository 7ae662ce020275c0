"""``procs.pid_alive``: a running process is alive; one that exited (reaped, or a zombie) or that vanishes while its
``/proc/<pid>/stat`` is read is gone, and never an error (the pod-network reaper died of that error)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mmrl_local.common import procs
from tests.support.polling import wait_until


def test_a_running_process_is_alive_and_a_reaped_one_is_gone() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert procs.pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not procs.pid_alive(child.pid)


def test_a_zombie_is_gone() -> None:
    child = subprocess.Popen(["true"])
    # Not reaped yet: the kernel keeps it as a zombie until we wait for it.
    wait_until(lambda: "Z" in Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1][:3], 10, what="zombie")
    assert not procs.pid_alive(child.pid)
    child.wait()


@pytest.mark.parametrize("error", [ProcessLookupError, FileNotFoundError, PermissionError])
def test_a_process_that_vanishes_while_its_stat_is_read_is_gone(monkeypatch, error: type[OSError]) -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:

        def vanishing(self: Path, *args: object, **kwargs: object) -> str:
            raise error(3, "No such process")

        monkeypatch.setattr(procs.Path, "read_text", vanishing)
        assert procs.pid_alive(child.pid) is False
        monkeypatch.undo()
        assert procs.pid_alive(child.pid) is True  # the same process, read normally
    finally:
        child.kill()
        child.wait()
