"""Shared against dedicated serving, with the real vLLM CPU build (issue #33 item 7): memory and time to serve.

For N = 1, 2, 4 LoRA adapters of the tiny Qwen3-VL:
- shared: ONE vLLM started with the command line a ModelServer's Deployment runs (`build_server_deployment`), the N
  adapters loaded at run time through `/v1/load_lora_adapter`, as the replica's gateway loads them (without the
  gateway's copy: the gateway's cost is the copy of each adapter, tests/e2e/test_gateway_vllm.py);
- dedicated: N vLLMs started at once, each with the command line a job's own Deployment runs (`build_deployment`,
  its adapter in `--lora-modules`).
Memory is the resident set of each server's whole process tree (vLLM runs its engine in a child process), read once
every adapter answers. Time to serve is measured to the adapter's first answer: on the warm shared server, from
the load request; for a dedicated server, from its start. The operator's own reaction (seconds either way) is
not in these figures; tests/e2e/test_shared_serving.py prints it end to end.

    python bench/shared_serving.py [--sizes 1 2 4] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import common
from mmrl_api import MultimodalRLJob
from mmrl_api.model_server import parse_server
from mmrl_local.toolchain import vllm_cpu
from mmrl_operator.core.builders.inference import Adapter, build_deployment
from mmrl_operator.core.builders.model_server import build_server_deployment
from mmrl_trainer.tiny import build_tiny_vlm
from tests.support.lora import export_random_adapter

START_TIMEOUT = 900.0
QUESTION = "What colour is this?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_port(args: list[str], port: int) -> list[str]:
    out = list(args)
    out[out.index("--port") + 1] = str(port)
    return [*out, "--host", "127.0.0.1"]


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    python = vllm_cpu.ensure() / "python"
    env = {**os.environ, **vllm_cpu.server_env(), "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(python), "-m", "vllm.entrypoints.openai.api_server", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def call(port: int, path: str, body: dict[str, Any] | None = None, timeout: float = 120) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST" if data else "GET")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        text = answer.read().decode()
    try:
        return json.loads(text)
    except ValueError:
        return text


def answers(port: int, model: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 8, "temperature": 0}
    return str(call(port, "/v1/chat/completions", body)["choices"][0]["message"]["content"])


def wait_up(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            call(port, "/v1/models", timeout=5)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"vLLM on {port} did not answer within {START_TIMEOUT:.0f}s")


def tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and all its descendants."""
    pids, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = Path(f"/proc/{parent}/task/{parent}/children")
        found = [int(x) for x in children.read_text().split()] if children.exists() else []
        frontier += [c for c in found if c not in pids]
        pids.update(found)
    total = 0.0
    for p in pids:
        status = Path(f"/proc/{p}/status")
        if status.exists():
            for line in status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
    return round(total, 1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def make_adapters(model: Path, out: Path, n: int) -> list[Path]:
    """N PEFT exports of the tiny model with non-zero B matrices, as the trainer exports them."""
    return [export_random_adapter(model, out / f"adapter-{i}", i + 1, str(model)).path for i in range(n)]


def shared(model: Path, adapters: list[Path], work: Path) -> dict[str, Any]:
    doc = {
        "apiVersion": "mmrl.dev/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": "bench", "namespace": "bench"},
        "spec": {
            "model": {"name": str(model)},
            "gpus": 0,
            "maxLoraRank": 8,
            "maxLoras": 4,
            "maxAdapters": 4,
            "maxModelLen": 512,
            "hyperpod": False,
        },
    }
    # vLLM's container (its args put it on loopback; with_port moves it): the bench loads through vLLM's own API, as
    # the replica's gateway does, since what is measured is vLLM's memory and load time, not the gateway's copy.
    container = build_server_deployment(parse_server(doc))["spec"]["template"]["spec"]["containers"][0]
    port, log = free_port(), work / "shared.log"
    began = time.monotonic()
    proc = start(with_port(container["args"], port), log)
    try:
        wait_up(port, proc, log)
        started = time.monotonic() - began
        loads = []
        for i, path in enumerate(adapters):
            t0 = time.monotonic()
            call(port, "/v1/load_lora_adapter", {"lora_name": f"a{i}", "lora_path": str(path)})
            answers(port, f"a{i}")
            loads.append(round(time.monotonic() - t0, 2))
        return {
            "servers": 1,
            "rss_mib": tree_rss_mib(proc.pid),
            "start_s": round(started, 1),
            "load_to_answer_s": loads,
        }
    finally:
        stop(proc)


def dedicated(model: Path, adapters: list[Path], work: Path) -> dict[str, Any]:
    procs = []
    for i, path in enumerate(adapters):
        job = MultimodalRLJob.model_validate(
            {
                "apiVersion": "mmrl.dev/v1alpha1",
                "kind": "MultimodalRLJob",
                "metadata": {"name": f"d{i}", "namespace": "bench"},
                "spec": {
                    "model": {"name": str(model)},
                    "lora": {"rank": 8, "alpha": 16},
                    "algorithm": {
                        "maxPromptLength": 128,
                        "maxResponseLength": 4,
                        "trainBatchSize": 8,
                        "miniBatchSize": 8,
                    },
                    "dataset": {"train": "synthetic://colors?n=8"},
                    "trainer": {"backend": "local"},
                    "checkpoint": {"pvc": {"claimName": "c"}},
                    "inference": {"gpus": 0, "maxModelLen": 512},
                },
            }
        )
        (container,) = build_deployment(job, Adapter(str(path), 8, str(model)))["spec"]["template"]["spec"][
            "containers"
        ]
        port, log = free_port(), work / f"dedicated-{i}.log"
        procs.append((port, log, time.monotonic(), start(with_port(container["args"], port), log), f"d{i}"))
    try:
        ready = []
        for port, log, began, proc, name in procs:
            wait_up(port, proc, log)
            answers(port, name)
            ready.append(round(time.monotonic() - began, 1))
        rss = sum(tree_rss_mib(proc.pid) for _, _, _, proc, _ in procs)
        return {"servers": len(procs), "rss_mib": round(rss, 1), "start_to_answer_s": ready}
    finally:
        for *_, proc, _ in procs:
            stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()
    work = args.out / "shared-serving-run"
    work.mkdir(parents=True, exist_ok=True)
    model = build_tiny_vlm()
    adapters = make_adapters(model, work / "adapters", max(args.sizes))
    rows = []
    for n in args.sizes:
        one, many = shared(model, adapters[:n], work), dedicated(model, adapters[:n], work)
        rows.append({"adapters": n, "shared": one, "dedicated": many})
        print(
            f"N={n}: one server {one['rss_mib']} MiB (loads to answer {one['load_to_answer_s']} s), "
            f"{n} servers {many['rss_mib']} MiB (start to answer {many['start_to_answer_s']} s)",
            flush=True,
        )
    common.write_result("shared-serving", {"rows": rows, "vllm_cpu": vllm_cpu.VERSION}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
