"""A pod that is not the operator trying to change what a shared server (ModelServer) holds: a tenant's pod in the
server's namespace, or one in another namespace. It asks, from inside the pod network, through the server's Service
and at a replica's pod IP, for vLLM's runtime LoRA API (load, unload, load_inplace of the alias), for vLLM's own port
on the replica, and for the gateway's admin API without the key or with a guessed one; it prints what each answered.
`make demo SHARED=1` shows one, and tests/e2e/test_shared_serving.py holds every answer to a refusal.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from mmrl_api.gateway_contract import ADMIN_KEY_HEADER, LOAD, PORT, UNLOAD, VLLM_PORT

STRANGER_IMAGE = "python:3.12-slim"  # locally: this checkout's Python environment (node/images.py)
_MARK = "ATTEMPTS "
_SCRIPT = r"""
import json, sys, urllib.error, urllib.request
out = []
for a in json.loads(sys.argv[1]):
    headers = {"Content-Type": "application/json", **a.get("headers", {})}
    req = urllib.request.Request(a["url"], data=json.dumps(a["body"]).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            status, answer = reply.status, reply.read(300).decode(errors="replace")
    except urllib.error.HTTPError as err:
        status, answer = err.code, err.read(300).decode(errors="replace")
    except Exception as err:
        status, answer = None, f"{type(err).__name__}: {err}"
    out.append({"what": a["what"], "url": a["url"], "status": status, "answer": answer})
print("ATTEMPTS " + json.dumps(out), flush=True)
"""


@dataclass(frozen=True)
class Attempt:
    what: str
    url: str
    status: int | None  # None: no connection (nothing listens there for the pod network)
    answer: str

    @property
    def refused(self) -> bool:
        return self.status is None or self.status in (401, 403, 404, 405)

    def line(self) -> str:
        said = f"HTTP {self.status}" if self.status is not None else "no connection"
        try:
            message = json.loads(self.answer).get("message", self.answer)
        except (ValueError, AttributeError):
            message = self.answer
        return f"{self.what} at {self.url}: {said} {' '.join(str(message).split())[:160]}"


def attempts(service_host: str, pod_ip: str, adapter: str, alias: str, path: str) -> list[dict[str, Any]]:
    """Every way a stranger might try to change what the server holds, at the Service and at one replica."""
    out: list[dict[str, Any]] = []
    guessed = {ADMIN_KEY_HEADER: "guessed"}
    for base in (f"http://{service_host}:{PORT}", f"http://{pod_ip}:{PORT}"):
        out += [
            {"what": "load", "url": f"{base}/v1/load_lora_adapter", "body": {"lora_name": "mine", "lora_path": path}},
            {"what": "unload", "url": f"{base}/v1/unload_lora_adapter", "body": {"lora_name": adapter}},
            {
                "what": "load_inplace",
                "url": f"{base}/v1/load_lora_adapter",
                "body": {"lora_name": alias, "lora_path": path, "load_inplace": True},
            },
            {"what": "admin unload", "url": f"{base}{UNLOAD}", "body": {"name": adapter}},
            {
                "what": "admin load, guessed key",
                "url": f"{base}{LOAD}",
                "body": {"name": alias, "source": path, "digest": "0" * 64, "inplace": True},
                "headers": guessed,
            },
        ]
    direct = f"http://{pod_ip}:{VLLM_PORT}/v1/unload_lora_adapter"
    out.append({"what": "unload at vLLM's own port", "url": direct, "body": {"lora_name": adapter}})
    return out


def run_stranger(
    core: client.CoreV1Api, namespace: str, name: str, node: str, tries: list[dict[str, Any]], timeout: float = 180
) -> list[Attempt]:
    """Run the attempts from a pod `name` in `namespace` on `node` (a node the local kubelet runs; every taint
    tolerated), and return what each got. The pod has no API token: it is any workload's pod."""
    pod = {
        "metadata": {"name": name, "labels": {"app": "stranger"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "stranger", "image": STRANGER_IMAGE, "command": ["python", "-c", _SCRIPT, json.dumps(tries)]}
            ],
        },
    }
    deadline = time.monotonic() + timeout
    # ServiceAccount admission refuses pods until the controller-manager has made the namespace's "default".
    while not core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {namespace}")
        time.sleep(0.2)
    core.create_namespaced_pod(namespace, pod)
    try:
        while (phase := core.read_namespaced_pod(name, namespace).status.phase) not in ("Succeeded", "Failed"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {namespace}/{name} still {phase} after {timeout:.0f}s")
            time.sleep(0.5)
        log = core.read_namespaced_pod_log(name, namespace)
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    line = next((ln for ln in log.splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        raise RuntimeError(f"pod {namespace}/{name} ended {phase} without its answers: {log[-1000:]}")
    return [Attempt(**a) for a in json.loads(line.removeprefix(_MARK))]
