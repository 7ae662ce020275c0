"""What a run (a test session, ``make demo``) left behind on this machine once it is over: a network namespace, an
``mm*`` link, a pod process or a control-plane process.

A run ``mark()``s itself before it starts anything: a fresh token in ``procs.RUN_MARK``. Every process it starts
inherits the mark (pods too: "the image" is this process's environment; a container run from a built image through
runc gets it appended to its image's and pod's env, ``image_run.marked``; an operator forked from the fork server
shows the server's, which serves its own run only) and every pod network it creates records the mark with its owner
in podnet's registry. So only what carries this run's mark counts, or, for a namespace or link that no registry
entry names, what appeared since the run's ``snapshot()``: another run on the machine (a developer's ``make up``) is
never blamed.

``python -m mmrl_local.leftovers -- CMD [ARG...]`` runs CMD as a marked run, and when it ends prints what it left
behind and exits non-zero (CMD's own status when that is already non-zero).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from mmrl_local.common import procs
from mmrl_local.network import podnet
from mmrl_local.toolchain import build

NETNS_PREFIX = "mmrl-"  # every network namespace local/ creates (podnet.netns_name, the probes)
LINK_PREFIX = "mm"  # every link local/ creates (podnet.bridge_name, podnet.veth_name)
CONTROL_PLANE_BINARIES = frozenset({*build.BINARIES, build.KUBERAY_BINARY})
CONTROL_PLANE_MODULES = ("mmrl_local.network.tcpforward", "mmrl_operator.cli")  # the apiserver relay, the operator
# The operators' fork server, and every child it forked: a child's command line is the server's (forkserver.py).
FORK_SERVER = "mmrl_local.common.forkserver"
POD_LAUNCHER = "mmrl_local.node.mountns"
POD_RUNTIME = "runc"  # runs a pod's container from its image (image_run), in the foreground, as the container's parent


@dataclass(frozen=True)
class Snapshot:
    """The namespaces and links on the machine before a run started."""

    netns: frozenset[str] = field(default_factory=frozenset)
    links: frozenset[str] = field(default_factory=frozenset)


def mark() -> str:
    """Mark this process, and so everything it starts from now on, as one run; returns the run's token."""
    token = secrets.token_hex(8)
    os.environ[procs.RUN_MARK] = token
    return token


def _names() -> tuple[set[str], set[str]]:
    if shutil.which("ip") is None:
        return set(), set()
    netns = {e.get("name", "") for e in podnet.ip_json("netns", "list")}
    links = {link.get("ifname", "").split("@")[0] for link in podnet.ip_json("link", "show")}
    return {n for n in netns if n.startswith(NETNS_PREFIX)}, {n for n in links if n.startswith(LINK_PREFIX)}


def snapshot() -> Snapshot:
    netns, links = _names()
    return Snapshot(frozenset(netns), frozenset(links))


def _network_is_ours(name: str, token: str, existed: frozenset[str]) -> bool:
    run = podnet.run_of(name)
    record = podnet.run_record(run) if run else None
    if record is not None:  # a pod network that is registered says which run it belongs to
        return record.get("mark") == token
    return name not in existed


def _proc(pid: int, what: str) -> bytes:
    return Path(f"/proc/{pid}/{what}").read_bytes()


def _carries(pid: int, token: str) -> bool:
    try:
        environ = _proc(pid, "environ").split(b"\0")
    except OSError:  # gone, or not ours to read
        return False
    return f"{procs.RUN_MARK}={token}".encode() in environ


def _parent(pid: int) -> int:
    return int(_proc(pid, "stat").rsplit(b")", 1)[1].split()[1])


def _forked_by(pid: int) -> int | None:
    """The fork server that forked ``pid``: its parent, when that has the same (the server's) command line."""
    try:
        parent = _parent(pid)
        return parent if _proc(parent, "cmdline") == _proc(pid, "cmdline") else None
    except (OSError, IndexError, ValueError):
        return None


def _kind(pid: int, argv: list[str]) -> str | None:
    """Whether the process is a pod process, a control-plane process, or neither (None: a helper of a test)."""
    try:
        own_mounts = os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        exe = Path(os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")).name
    except OSError:
        return None
    # A container has a mount namespace of its own; its launcher (mountns) or runtime (runc) has not.
    if own_mounts or POD_LAUNCHER in argv or exe == POD_RUNTIME:
        return "pod process"
    if exe in CONTROL_PLANE_BINARIES or any(module in argv for module in (*CONTROL_PLANE_MODULES, FORK_SERVER)):
        return "control-plane process"
    return None


def _processes(token: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        if not _carries(pid, token) or not procs.pid_alive(pid):
            continue
        try:
            argv = [a.decode(errors="replace") for a in _proc(pid, "cmdline").split(b"\0") if a]
        except OSError:
            continue
        kind = _kind(pid, argv)
        if kind is None:
            continue
        note = ""
        if FORK_SERVER in argv:  # the server or a child (an operator) of it: both have the server's command line
            server = _forked_by(pid)
            note = " (the fork server)" if server is None else f" (forked by the fork server {server})"
        found.append(f"{kind} {pid}{note}: {' '.join(argv)[:300]}")
    return found


def find_leftovers(token: str, before: Snapshot | None = None, *, settle: float = 0.0) -> list[str]:
    """What the run marked ``token`` left: one line per namespace, link and process. ``before`` is the run's
    snapshot (what was there is not the run's, unless its registry entry says so). With ``settle``, look again for
    up to that many seconds while something is left (processes SIGKILLed a moment ago are still exiting)."""
    before = before or Snapshot()
    deadline = time.monotonic() + settle
    while True:
        netns, links = _names()
        found = [f"network namespace {n}" for n in sorted(netns) if _network_is_ours(n, token, before.netns)]
        found += [f"link {n}" for n in sorted(links) if _network_is_ours(n, token, before.links)]
        found += _processes(token)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)


def report(found: list[str], who: str) -> str:
    lines = [f"{who} left behind:", *(f"  {line}" for line in found)]
    lines.append("(`python -m mmrl_local down` removes pod networks whose run is gone; stop the processes by pid)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m mmrl_local.leftovers -- CMD [ARG...]", file=sys.stderr)
        return 2
    token, before = mark(), snapshot()
    # Ctrl-C reaches CMD (same process group); this process stays to look at what CMD's teardown left. A handler,
    # not SIG_IGN: CMD would inherit an ignored SIGINT, while a handler is reset to the default by exec.
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        code = subprocess.run(command).returncode
    finally:
        signal.signal(signal.SIGINT, previous)
    code = 128 - code if code < 0 else code
    found = find_leftovers(token, before, settle=10.0)
    if found:
        print(report(found, " ".join(command)), file=sys.stderr)
        return code or 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
