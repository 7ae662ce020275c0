"""``python -m mmrl_local build | images | up | down | env``: build the binaries, or the images in docker/ (buildah,
``images_build``); run a local control plane with fake HyperPod nodes and the KubeRay stand-in (in the foreground, or
detached with a state file that ``down`` reads); print the shell exports that point kubectl/helm at it. ``up`` and
``down`` both remove what a killed run left of its pod network (namespaces, veths, bridge: see ``podnet``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from mmrl_local.common import procs
from mmrl_local.toolchain import build, kueue_build


def state_dir() -> Path:
    return build.cache_root() / "run"


def state_file() -> Path:
    return state_dir() / "state.json"


def read_state() -> dict | None:
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        return json.loads(state_file().read_text())
    return None


def cmd_build(args: argparse.Namespace) -> int:
    # KubeRay and Kueue build after the control plane, from its compiled packages (every wrapper module selects
    # go/kube's version of each module it shares), beside each other: one's single-threaded link fills the core the
    # other leaves idle. Built beside the control plane, KubeRay compiled the same libraries a second time.
    bins = build.build()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        kuberay = pool.submit(build.build_kuberay) if args.kuberay else None
        kueue = pool.submit(kueue_build.binaries) if args.kueue else None
        crd_dir = build.kuberay_crd_dir()
        print(f"binaries: {bins.dir}")
        print(f"kuberay CRDs: {crd_dir} ({build.KUBERAY_MODULE}@{build.KUBERAY_VERSION})")
        print(f"ServiceMonitor CRD (chart tests): {build.servicemonitor_crd_path()}")
        if kuberay is not None:
            print(f"kuberay operator: {kuberay.result()}")
        if kueue is not None:
            print(f"kueue ({kueue_build.KUEUE_VERSION}): {kueue.result()}")
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    from mmrl_local.toolchain import images_build

    started = time.monotonic()
    facts = images_build.build_operator()
    how = "reused" if facts.reused else f"built in {facts.build_seconds} s, {facts.base_seconds} s of it the base"
    print(f"operator image: {facts.image}@{facts.digest} ({how})")
    print(f"  {facts.size_mb} MB in {facts.layers} layers, from {facts.base}, storage driver {facts.storage_driver}")
    print(f"  this run: {time.monotonic() - started:.1f} s")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    state = read_state()
    if state and procs.pid_alive(state["pid"]):
        print(f"already up (pid {state['pid']}); run `python -m mmrl_local down` first", file=sys.stderr)
        return 1
    if args.detach:
        return _up_detached(args)
    from kubernetes import client

    from mmrl_local.cluster import nodes
    from mmrl_local.cluster.controlplane import ControlPlane
    from mmrl_local.standin.kuberay_standin import KubeRayStandIn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    workdir = state_dir() / "cluster"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    with ControlPlane(workdir=workdir) as cp:
        if cp.network_note:
            print(cp.network_note, flush=True)
        api = cp.api_client()
        core = client.CoreV1Api(api)
        head_nodes = [nodes.create_cpu_node(core) for _ in range(args.cpu_nodes)]
        gpu_nodes = nodes.create_gpu_nodes(core, args.gpu_nodes)
        standin = None
        if args.standin != "none":
            standin = KubeRayStandIn(
                api, mode=args.standin, log_dir=workdir / "rayjob-logs", network=cp.pod_network
            ).start()
        state = {
            "pid": os.getpid(),
            "pids": cp.pids,
            "kubeconfig": str(cp.kubeconfig),
            "bin": str(cp.binaries.dir),
            "nodes": head_nodes + gpu_nodes,
            "workdir": str(workdir),
        }
        state_file().write_text(json.dumps(state, indent=2))
        print(f"control plane up in {cp.timings['total']} s ({len(gpu_nodes)} GPU + {len(head_nodes)} CPU nodes)")
        print(_exports(state), flush=True)
        try:
            while not stopping.wait(1.0):
                pass
        finally:
            if standin is not None:
                standin.stop()
            state_file().unlink(missing_ok=True)
    return 0


def _up_detached(args: argparse.Namespace) -> int:
    state_dir().mkdir(parents=True, exist_ok=True)
    log = state_dir() / "up.log"
    argv = [
        sys.executable,
        "-m",
        "mmrl_local",
        "up",
        f"--gpu-nodes={args.gpu_nodes}",
        f"--cpu-nodes={args.cpu_nodes}",
        f"--standin={args.standin}",
    ]
    with open(log, "w") as out:
        # A new session and no parent-death signal: this one is meant to outlive the shell command.
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = read_state()
        if state and state["pid"] == proc.pid:
            print(_exports(state))
            return 0
        if proc.poll() is not None:
            print(log.read_text(), file=sys.stderr)
            return 1
        time.sleep(0.2)
    print(f"timed out waiting for the control plane; see {log}", file=sys.stderr)
    return 1


def _remove_network_leftovers() -> None:
    from mmrl_local.network import podnet

    removed = podnet.remove_leftovers()
    if removed:
        print(f"removed what killed runs left of their pod networks: {', '.join(removed)}")


def cmd_down(args: argparse.Namespace) -> int:
    state = read_state()
    if not state:
        _remove_network_leftovers()
        print("nothing is up", file=sys.stderr)
        return 0
    if procs.pid_alive(state["pid"]):
        os.kill(state["pid"], signal.SIGTERM)
    leftovers = procs.wait_gone([state["pid"], *state["pids"]], timeout=20)
    for pid in leftovers:  # the supervisor died hard: finish its children ourselves
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    state_file().unlink(missing_ok=True)
    _remove_network_leftovers()
    print("down")
    return 0


def _exports(state: dict) -> str:
    return f"export KUBECONFIG={state['kubeconfig']}\nexport PATH={state['bin']}:$PATH"


def cmd_env(args: argparse.Namespace) -> int:
    state = read_state()
    if not state or not procs.pid_alive(state["pid"]):
        print("the local control plane is not up; run `python -m mmrl_local up --detach`", file=sys.stderr)
        return 1
    print(_exports(state))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmrl_local", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or reuse) the control plane binaries and fetch KubeRay's CRDs")
    b.add_argument("--kuberay", action="store_true", help="also build the real KubeRay operator")
    b.add_argument("--kueue", action="store_true", help="also build Kueue's controller and its webhook checks")
    sub.add_parser("images", help="build (or reuse) the operator image with buildah (docker/operator.Dockerfile)")
    up = sub.add_parser("up", help="start a control plane with fake HyperPod nodes and the KubeRay stand-in")
    up.add_argument("--detach", action="store_true", help="run in the background; stop with `down`")
    up.add_argument("--gpu-nodes", type=int, default=2)
    up.add_argument("--cpu-nodes", type=int, default=1)
    up.add_argument("--standin", choices=["scripted", "run", "none"], default="run")
    sub.add_parser("down", help="stop what `up --detach` started")
    sub.add_parser("env", help="print `export KUBECONFIG=...` for the running control plane")
    args = parser.parse_args(argv)
    commands = {"build": cmd_build, "images": cmd_images, "up": cmd_up, "down": cmd_down, "env": cmd_env}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
