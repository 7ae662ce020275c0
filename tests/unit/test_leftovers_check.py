"""The suite's end-state check, run for real in an inner pytest with the suite's own plugins (tests/conftest.py's
list, so the check must be installed there): a session that leaves a network namespace, an ``mm*`` link, a pod
process, a container run from the operator image through runc, or an operator forked from the fork server behind
fails, naming each, even though every test passed, also when its tests ran in parallel workers (pytest-xdist, as
`make test` runs them: the check runs on the controller once the workers are done); a session that cleans up
passes; what was there before the session is not its doing."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmrl_local.common import procs
from mmrl_local.network import podnet
from mmrl_local.node import image_run
from mmrl_local.toolchain import images_build

# Both files add unregistered namespaces and links that the other's snapshots would count: in a parallel run
# (pytest-xdist) they share one worker, so they never run at the same time (tests/support/parallel.py).

# The inner run's plugins are the suite's: a check that tests/conftest.py does not install fails these tests.
SUITE_CONFTEST = "from tests.conftest import pytest_plugins  # noqa: F401\n"

# Each leak is started in a session of its own, so that nothing the worker does on its way out stops it; its pids
# are written to LEAK_DIR for the outer test to check and to clean up.
LEAKS = """
import json, os, subprocess, sys
from pathlib import Path
from mmrl_local.addons.operator_process import FORKSERVER_ENV, PREIMPORT, OperatorProcess
from mmrl_local.common import forkserver
from mmrl_local.network import podnet
from mmrl_local.node import image_run
from mmrl_local.toolchain import images_build
from tests.support.polling import wait_until

LEAK_DIR = Path(os.environ["LEAK_DIR"])
QUIET = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}

def record(name, **pids):
    (LEAK_DIR / f"{name}.json").write_text(json.dumps(pids))

def test_leaks_a_namespace_a_link_and_a_pod_process():
    podnet.ip("netns", "add", os.environ["LEAK_NETNS"])
    podnet.ip("link", "add", os.environ["LEAK_LINK"], "type", "bridge")
    pod = subprocess.Popen(["unshare", "--mount", "sleep", "60"], start_new_session=True)
    record("pod", pid=pod.pid)

def test_leaks_a_container_run_from_the_operator_image():
    # Owned by the outer test, which outlives this worker: once the worker is gone, another run's remove_stale
    # (any worker of a parallel suite starting a container) would otherwise take the leak away before the check.
    owner = int(os.environ["LEAK_OWNER"])
    container = image_run.ImageContainer(
        images_build.storage(), os.environ["LEAK_IMAGE"], LEAK_DIR / "bundle", "mmrl-leak", owner
    )
    sleeper = ["python", "-c", "import time; time.sleep(600)"]
    spec = container.one_off_spec(container.prepare(), sleeper, None, [])
    record("container", id=container.container_id)
    runc = subprocess.Popen(container.run_argv(spec), start_new_session=True, **QUIET)
    pid = wait_until(container.pid, 60, what="runc to create the container")
    # runc execs the container's process once it starts it: wait for that, so the pid is the sleeper's.
    wait_until(lambda: b"sleep(600)" in Path(f"/proc/{pid}/cmdline").read_bytes(), 60, what="the sleeper to start")
    record("container", id=container.container_id, runc=runc.pid, pid=pid)

def test_leaks_an_operator_forked_from_the_fork_server():
    sock = LEAK_DIR / "operator.sock"
    argv = [sys.executable, "-m", "mmrl_local.common.forkserver", str(sock), *PREIMPORT]
    server = subprocess.Popen(argv, start_new_session=True, **QUIET)
    record("operator", server=server.pid)
    wait_until(sock.exists, 120, what="the fork server to listen")
    kubeconfig = Path(os.environ["LEAK_KUBECONFIG"])
    operator = OperatorProcess(kubeconfig, LEAK_DIR / "operator.log", env={FORKSERVER_ENV: str(sock)}).start()
    assert isinstance(operator.proc, forkserver.ForkedProcess)
    record("operator", server=server.pid, pid=operator.proc.pid)

def test_cleans_up():
    pass
"""

CLEAN = """
import os, subprocess
from mmrl_local.network import podnet

def test_cleans_up():
    podnet.ip("netns", "add", os.environ["LEAK_NETNS"])
    podnet.ip("netns", "del", os.environ["LEAK_NETNS"])
    subprocess.run(["unshare", "--mount", "true"], check=True)
"""

# The operator's apiserver: it accepts connections (the kernel does, into its backlog) and never answers, so the
# forked operator waits in its first request for as long as the test needs it to run.
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: silent, cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}}}]
users: [{{name: nobody, user: {{token: none}}}}]
contexts: [{{name: silent, context: {{cluster: silent, user: nobody}}}}]
current-context: silent
"""


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    reason = podnet.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    tag = secrets.token_hex(3)
    # A short directory of its own: the fork server's Unix socket path must fit in 108 bytes.
    leak_dir = Path(tempfile.mkdtemp(prefix="mmrl-leak-"))
    # The probe name of this (live) process: no other run's cleanup on the machine removes it meanwhile.
    found = {
        "LEAK_NETNS": f"mmrl-probe-{os.getpid()}-leak{tag}",
        "LEAK_LINK": f"mmt{tag}",
        "LEAK_DIR": str(leak_dir),
        "LEAK_OWNER": str(os.getpid()),
    }
    for key, value in found.items():
        monkeypatch.setenv(key, value)
    yield found
    podnet.ip("netns", "del", found["LEAK_NETNS"], check=False)
    podnet.ip("link", "del", found["LEAK_LINK"], check=False)
    shutil.rmtree(leak_dir, ignore_errors=True)


@pytest.fixture
def silent_apiserver(names: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    listener = socket.create_server(("127.0.0.1", 0))
    kubeconfig = Path(names["LEAK_DIR"]) / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(port=listener.getsockname()[1]))
    monkeypatch.setenv("LEAK_KUBECONFIG", str(kubeconfig))
    with listener:
        yield


@pytest.fixture
def operator_image(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reused in a fraction of a second when `make images` (or an earlier run) built it for this checkout.
    monkeypatch.setenv("LEAK_IMAGE", images_build.build_operator(verbose=False).image)


def run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makeconftest(SUITE_CONFTEST)
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def leaked(leak_dir: Path) -> dict[str, dict]:
    """What the inner run recorded it started, by leak."""
    return {path.stem: json.loads(path.read_text()) for path in leak_dir.glob("*.json")}


def clean_up(left: dict[str, dict]) -> None:
    container = left.get("container", {})
    if "id" in container:
        image_run.remove_container(images_build.storage(), container["id"])
    pids = [pid for leak in left.values() for key, pid in leak.items() if key != "id"]
    for pid in pids:  # each leak is the leader of a session (and group) of its own
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    assert procs.wait_gone(pids) == []


def test_a_session_that_leaves_things_behind_fails_and_names_them(
    pytester, names, silent_apiserver, operator_image
) -> None:
    result = run(pytester, LEAKS, "-n", "2")
    left = leaked(Path(names["LEAK_DIR"]))
    try:
        result.stdout.fnmatch_lines(["*created: 2/2 workers*"])
        result.assert_outcomes(passed=4)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        pod, container, operator = left["pod"], left["container"], left["operator"]
        # One pattern at a time: the lines' order is /proc's.
        for line in (
            "*left behind*",
            f"*network namespace {names['LEAK_NETNS']}*",
            f"*link {names['LEAK_LINK']}*",
            f"*pod process {pod['pid']}: sleep 60*",
            f"*pod process {container['pid']}: python -c import time; time.sleep(600)*",
            f"*pod process {container['runc']}: runc *{container['id']}*",
            f"*control-plane process {operator['server']} (the fork server): *",
            f"*control-plane process {operator['pid']} (forked by the fork server {operator['server']}): *",
        ):
            result.stdout.fnmatch_lines([line])
    finally:
        clean_up(left)


def test_a_session_that_cleans_up_passes(pytester, names) -> None:
    result = run(pytester, CLEAN)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "left behind" not in result.stdout.str()


def test_what_was_there_before_the_session_is_not_its_doing(pytester, names) -> None:
    podnet.ip("netns", "add", names["LEAK_NETNS"])
    result = run(pytester, "def test_nothing():\n    pass\n")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
