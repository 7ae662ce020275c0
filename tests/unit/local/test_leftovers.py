"""``mmrl_local.leftovers`` finds what a run left behind, for real: a network namespace and an ``mm*`` link created
after the run's snapshot, a registered pod network with the run's mark, a marked process in a mount namespace of its
own (a pod's) and a marked apiserver relay (control plane); and not what another run owns or what was there before.
``python -m mmrl_local.leftovers -- CMD`` (what ``make demo`` runs) fails when CMD left something."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmrl_local import leftovers
from mmrl_local.common import procs
from mmrl_local.network import podnet
from tests.support.polling import wait_until

# Both files add unregistered namespaces and links that the other's snapshots would count: in a parallel run
# (pytest-xdist) they share one worker, so they never run at the same time (tests/conftest.py, _SHARE_A_WORKER).


@pytest.fixture(autouse=True)
def own_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests mark runs of their own; the session's mark is given back after each."""
    monkeypatch.delenv(procs.RUN_MARK, raising=False)


@pytest.fixture
def network_names() -> Iterator[list[tuple[str, str]]]:
    """(kind, name) of the namespaces and links a test creates; each is removed after it."""
    reason = podnet.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    made: list[tuple[str, str]] = []
    yield made
    for kind, name in made:
        if kind == "netns":
            podnet.ip("netns", "del", name, check=False)
        else:
            podnet.ip("link", "del", name, check=False)


def add_netns(made: list[tuple[str, str]], name: str) -> str:
    made.append(("netns", name))
    podnet.ip("netns", "add", name)
    return name


def add_link(made: list[tuple[str, str]], name: str) -> str:
    made.append(("link", name))
    podnet.ip("link", "add", name, "type", "bridge")  # no address, never up: nothing reaches it
    return name


def test_namespaces_and_links_made_after_the_snapshot_are_reported(network_names) -> None:
    # Named as `unavailable_reason`'s probe of this (live) process: no other run's cleanup removes it meanwhile.
    tag = secrets.token_hex(3)
    earlier = add_netns(network_names, f"mmrl-probe-{os.getpid()}-old{tag}")
    token, before = leftovers.mark(), leftovers.snapshot()
    netns = add_netns(network_names, f"mmrl-probe-{os.getpid()}-new{tag}")
    link = add_link(network_names, f"mmt{tag}")
    found = leftovers.find_leftovers(token, before)
    assert f"network namespace {netns}" in found and f"link {link}" in found
    assert not any(earlier in line for line in found)  # there before the run: not the run's


def test_a_registered_pod_network_counts_for_the_run_its_mark_names(network_names) -> None:
    token = leftovers.mark()
    mine, other = secrets.token_hex(3), secrets.token_hex(3)
    owner = {"pid": os.getpid(), "start": podnet._start_time(os.getpid())}  # live: no cleanup takes them meanwhile
    podnet.REGISTRY.mkdir(parents=True, exist_ok=True)
    records = {run: podnet.REGISTRY / f"{run}.json" for run in (mine, other)}
    records[mine].write_text(json.dumps({**owner, "mark": token}))
    records[other].write_text(json.dumps({**owner, "mark": "another-run"}))
    try:
        ns_mine = add_netns(network_names, podnet.netns_name(mine, 0, "ns/pod"))
        before = leftovers.snapshot()  # that it was there before does not matter: the registry says whose it is
        ns_other = add_netns(network_names, podnet.netns_name(other, 0, "ns/pod"))
        link_other = add_link(network_names, podnet.veth_name(other, 0))
        found = leftovers.find_leftovers(token, before)
        assert f"network namespace {ns_mine}" in found
        assert not any(ns_other in line or link_other in line for line in found)
    finally:
        for record in records.values():
            record.unlink(missing_ok=True)


@pytest.mark.parametrize("starts", ["while the names are read", "while the owners are read"])
def test_cleanup_never_takes_a_run_that_starts_during_it(network_names, monkeypatch, starts) -> None:
    """``remove_leftovers`` (every control-plane start) runs while other runs start: a parallel test worker, a
    second control plane. A run registers, then creates; whenever that lands, its record and namespace stay."""
    run = secrets.token_hex(3)
    record = podnet.REGISTRY / f"{run}.json"
    owner = {"pid": os.getpid(), "start": podnet._start_time(os.getpid()), "mark": "another-run"}

    def a_run_starts() -> None:
        podnet.REGISTRY.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(owner))
        add_netns(network_names, podnet.netns_name(run, 0, "ns/pod"))

    target = "ours" if starts == "while the names are read" else "live_runs"
    real = getattr(podnet, target)

    def with_a_run_starting():
        a_run_starts()  # before the names are listed, or after ...
        return real()

    def with_a_run_starting_after():
        found = real()  # ... the owners were read
        a_run_starts()
        return found

    monkeypatch.setattr(podnet, target, with_a_run_starting if target == "ours" else with_a_run_starting_after)
    try:
        podnet.remove_leftovers()
        assert record.exists()
        assert podnet.netns_name(run, 0, "ns/pod") in {e.get("name") for e in podnet.ip_json("netns", "list")}
    finally:
        record.unlink(missing_ok=True)


def test_a_record_staged_by_a_killed_run_is_removed_and_a_live_runs_stays(network_names) -> None:
    """A run writes its record to ``<run>.tmp`` and renames it into place; killed in between, it leaves the staged
    file, which the next cleanup removes once its owner is gone, and only then."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = {"pid": gone.pid, "start": -1, "mark": "another-run"}  # no process started at -1: its owner is gone
    live = {"pid": os.getpid(), "start": podnet._start_time(os.getpid()), "mark": "another-run"}
    podnet.REGISTRY.mkdir(parents=True, exist_ok=True)
    staged = {name: podnet.REGISTRY / f"{secrets.token_hex(3)}.tmp" for name in ("dead", "live")}
    staged["dead"].write_text(json.dumps(dead))
    staged["live"].write_text(json.dumps(live))
    try:
        podnet.remove_leftovers()
        assert not staged["dead"].exists() and staged["live"].exists()
    finally:
        for path in staged.values():
            path.unlink(missing_ok=True)


def marked_env(token: str) -> dict[str, str]:
    return {**os.environ, procs.RUN_MARK: token}


def test_pod_and_control_plane_processes_carrying_the_mark_are_reported(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("not root: `unshare --mount` (a pod's own mount namespace) needs CAP_SYS_ADMIN")
    token = leftovers.mark()
    os.environ.pop(procs.RUN_MARK)  # only the processes below carry it (`own_mark` gives the session's back)
    pod = subprocess.Popen(["unshare", "--mount", "sleep", "60"], env=marked_env(token))
    unmarked = subprocess.Popen(["unshare", "--mount", "sleep", "60"])
    listener = socket.create_server(("127.0.0.1", 0))
    relay_argv = [sys.executable, "-m", "mmrl_local.network.tcpforward", str(listener.fileno()), "127.0.0.1", "1"]
    relay = subprocess.Popen(relay_argv, env=marked_env(token), pass_fds=(listener.fileno(),))
    listener.close()
    try:
        # `unshare` execs sleep once the namespace is made: wait for that, so the pid is the pod's process.
        wait_until(lambda: os.readlink(f"/proc/{pod.pid}/exe").endswith("sleep"), 10, what="sleep in its namespace")
        found = wait_until(lambda: len(leftovers.find_leftovers(token)) == 2 and leftovers.find_leftovers(token), 10)
        assert any(line.startswith(f"pod process {pod.pid}: sleep 60") for line in found), found
        assert any(line.startswith(f"control-plane process {relay.pid}:") for line in found), found
        assert not any(str(unmarked.pid) in line for line in found)
    finally:
        for proc in (pod, unmarked, relay):
            proc.kill()
            proc.wait()
    assert leftovers.find_leftovers(token) == []


def run_checked(*command: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "mmrl_local.leftovers", "--", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_the_wrapper_passes_the_commands_status_through_when_nothing_is_left() -> None:
    assert run_checked("true").returncode == 0
    assert run_checked(sys.executable, "-c", "raise SystemExit(3)").returncode == 3


LEAVES_A_RELAY = """
import socket, subprocess, sys
listener = socket.create_server(("127.0.0.1", 0))
argv = [sys.executable, "-m", "mmrl_local.network.tcpforward", str(listener.fileno()), "127.0.0.1", "1"]
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # it must not hold the test's pipes open
relay = subprocess.Popen(argv, pass_fds=(listener.fileno(),), start_new_session=True, **quiet)
print(relay.pid, flush=True)
"""


def test_the_wrapper_fails_and_names_what_the_command_left_behind() -> None:
    done = run_checked(sys.executable, "-c", LEAVES_A_RELAY)
    pid = int(done.stdout.split()[0])
    try:
        assert done.returncode == 1, done.stderr
        assert f"control-plane process {pid}:" in done.stderr and "left behind" in done.stderr
    finally:
        os.kill(pid, 9)
    assert procs.wait_gone([pid]) == []
