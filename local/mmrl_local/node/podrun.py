"""Run a process inside a (fake-kubelet) pod's view of the world, the way the kubelet would have started it.

kwok marks pods Running but runs nothing. For the pods whose work matters locally (the Ray head that runs a
RayJob's entrypoint, the vLLM server of the inference Deployment) this module does the kubelet's share for one
process: it reads the pod from the API and materialises its volumes (ConfigMap and Secret files, a
PersistentVolumeClaim's bound hostPath PersistentVolume, emptyDirs, and the projected ServiceAccount token made
with the TokenRequest API, with the cluster CA and namespace beside it), resolves the container's env (literal
values, fieldRef, ConfigMap and Secret keys, envFrom) plus KUBERNETES_SERVICE_HOST/PORT pointing at the real
apiserver, and starts the command through ``mountns`` so every volume appears at its ``mountPath``. Given the pod's
``podnet.Sandbox``, the process runs in the pod's own network namespace and reaches the apiserver the way that
namespace can (``Sandbox.service_env``); without one it shares this machine's network.

"The image" is this machine: a caller passes the environment the image would set (PATH with the Python that has
mmrl installed, for example). Nothing here knows about mmrl's own paths.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from kubernetes import client

from mmrl_local.common import procs
from mmrl_local.network.podnet import Sandbox
from mmrl_local.node.mountns import Mount, Spec

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class PodRunError(RuntimeError):
    """The pod cannot be started here (an unbound claim, a volume type we cannot provide...)."""


@dataclass
class PodView:
    pod: str
    env: dict[str, str]
    mounts: list[Mount]
    cwd: str
    command: list[str]


def _field(pod: dict, path: str) -> str:
    """A downward-API fieldPath (metadata.name, spec.nodeName, status.podIP, metadata.labels['k'], ...)."""
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if keyed:
        return str((pod["metadata"].get(keyed[1]) or {}).get(keyed[2], ""))
    value: object = pod
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def local_image_env() -> dict[str, str]:
    """What "the image" sets locally: this process's environment, with this Python's bin directory first on PATH
    (so `python` is the interpreter that has mmrl and its dependencies installed)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


class PodMaterialiser:
    def __init__(
        self,
        api: client.ApiClient,
        workdir: Path,
        image_env: dict[str, str] | None = None,
        pod_volumes: Path | None = None,
    ) -> None:
        """`workdir`: this container's files; `pod_volumes`: where the pod's emptyDirs live, shared by its containers
        and kept across their restarts, as a kubelet keeps them (default: under `workdir`)."""
        self.api = api
        self.core = client.CoreV1Api(api)
        self.workdir = workdir
        self.pod_volumes = pod_volumes or workdir / "volumes"
        self.image_env = dict(image_env if image_env is not None else local_image_env())

    # -- lookups ---------------------------------------------------------------------------------------------

    def _config_map(self, ns: str, name: str) -> dict[str, str]:
        return self.core.read_namespaced_config_map(name, ns).data or {}

    def _secret(self, ns: str, name: str) -> dict[str, str]:
        data = self.core.read_namespaced_secret(name, ns).data or {}
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    def _claim_path(self, ns: str, claim: str) -> str:
        pvc = self.core.read_namespaced_persistent_volume_claim(claim, ns)
        if pvc.status.phase != "Bound" or not pvc.spec.volume_name:
            raise PodRunError(f"persistentvolumeclaim {ns}/{claim} is not bound ({pvc.status.phase})")
        pv = self.core.read_persistent_volume(pvc.spec.volume_name)
        source = pv.spec.host_path or pv.spec.local
        if source is None:
            raise PodRunError(f"persistentvolume {pv.metadata.name}: only hostPath and local volumes run locally")
        return source.path

    def _token(self, pod: dict, expiration: int) -> str:
        meta = pod["metadata"]
        body = {
            "spec": {
                "expirationSeconds": max(expiration, 600),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
            }
        }
        sa = pod["spec"].get("serviceAccountName") or "default"
        return self.core.create_namespaced_service_account_token(sa, meta["namespace"], body).status.token

    # -- volumes ---------------------------------------------------------------------------------------------

    @staticmethod
    def _write(directory: Path, files: dict[str, str], items: list[dict] | None) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        chosen = {i["key"]: i.get("path", i["key"]) for i in items} if items else {k: k for k in files}
        for key, rel in chosen.items():
            if key in files:
                (directory / rel).parent.mkdir(parents=True, exist_ok=True)
                (directory / rel).write_text(files[key])
        return directory

    def _projected(self, pod: dict, volume: dict, directory: Path) -> Path:
        ns = pod["metadata"]["namespace"]
        directory.mkdir(parents=True, exist_ok=True)
        for source in volume["projected"].get("sources") or []:
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                (directory / sat.get("path", "token")).write_text(
                    self._token(pod, int(sat.get("expirationSeconds", 3607)))
                )
            elif "configMap" in source:
                cm = source["configMap"]
                self._write(directory, self._config_map(ns, cm["name"]), cm.get("items"))
            elif "secret" in source:
                sec = source["secret"]
                self._write(directory, self._secret(ns, sec["name"]), sec.get("items"))
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    (directory / item["path"]).write_text(_field(pod, item["fieldRef"]["fieldPath"]))
        return directory

    def _volume(self, pod: dict, volume: dict) -> tuple[str | None, bool]:
        """(host source, is a tmpfs) of one pod volume."""
        ns, name = pod["metadata"]["namespace"], volume["name"]
        directory = self.workdir / "volumes" / name
        if "configMap" in volume:
            cm = volume["configMap"]
            return str(self._write(directory, self._config_map(ns, cm["name"]), cm.get("items"))), False
        if "secret" in volume:
            sec = volume["secret"]
            return str(self._write(directory, self._secret(ns, sec["secretName"]), sec.get("items"))), False
        if "persistentVolumeClaim" in volume:
            return self._claim_path(ns, volume["persistentVolumeClaim"]["claimName"]), False
        if "hostPath" in volume:
            return volume["hostPath"]["path"], False
        if "emptyDir" in volume:
            if (volume["emptyDir"] or {}).get("medium") == "Memory":
                return None, True
            directory = self.pod_volumes / name
            directory.mkdir(parents=True, exist_ok=True)
            os.chmod(directory, 0o777)  # as the kubelet makes it: writable by a container's non-root user
            return str(directory), False
        if "projected" in volume:
            return str(self._projected(pod, volume, directory)), False
        raise PodRunError(f"volume {name}: type {sorted(set(volume) - {'name'})} cannot be provided locally")

    # -- env -------------------------------------------------------------------------------------------------

    def _env(self, pod: dict, container: dict) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        server = urlparse(self.api.configuration.host)
        env = {
            **self.image_env,
            "HOSTNAME": pod["metadata"]["name"],
            # The kubelet points pods at the `kubernetes` Service. In this machine's network namespace that is the
            # apiserver itself; ``spawn_in_pod`` replaces it with the relay a pod's own namespace reaches.
            "KUBERNETES_SERVICE_HOST": server.hostname or "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(server.port or 443),
        }
        env.pop("KUBECONFIG", None)  # a pod has its ServiceAccount, not the developer's kubeconfig
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                env.update({prefix + k: v for k, v in self._config_map(ns, source["configMapRef"]["name"]).items()})
            elif "secretRef" in source:
                env.update({prefix + k: v for k, v in self._secret(ns, source["secretRef"]["name"]).items()})
        for var in container.get("env") or []:
            if "value" in var:
                env[var["name"]] = str(var["value"])
                continue
            ref = var.get("valueFrom") or {}
            if "fieldRef" in ref:
                env[var["name"]] = _field(pod, ref["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in ref:
                key = ref["configMapKeyRef"]
                env[var["name"]] = self._config_map(ns, key["name"]).get(key["key"], "")
            elif "secretKeyRef" in ref:
                key = ref["secretKeyRef"]
                env[var["name"]] = self._secret(ns, key["name"]).get(key["key"], "")
        return env

    # -- the view --------------------------------------------------------------------------------------------

    def view(self, pod: dict, container_name: str | None = None) -> PodView:
        containers = pod["spec"]["containers"]
        every = [*(pod["spec"].get("initContainers") or []), *containers]
        container = next((c for c in every if c["name"] == container_name), containers[0])
        sources = {v["name"]: self._volume(pod, v) for v in pod["spec"].get("volumes") or []}
        mounts = []
        for vm in container.get("volumeMounts") or []:
            source, tmpfs = sources[vm["name"]]
            if source is not None and vm.get("subPath"):
                volume, source = source, os.path.join(source, vm["subPath"])
                if os.path.isdir(volume) and not os.path.lexists(source):
                    # As a kubelet does: a sub-path not there yet is made in the volume (a shared server mounts
                    # <claim>/<namespace> before its first job has written anything there); one that is there, a
                    # file of a ConfigMap say, is mounted as it is.
                    os.makedirs(source)
            mounts.append(Mount(vm["mountPath"], source, bool(vm.get("readOnly")), tmpfs))
        return PodView(
            pod=pod["metadata"]["name"],
            env=self._env(pod, container),
            mounts=mounts,
            cwd=container.get("workingDir") or "/",
            command=[*(container.get("command") or []), *(container.get("args") or [])],
        )


def spawn_in_pod(
    view: PodView,
    argv: list[str],
    log: Path,
    root: Path,
    sandbox: Sandbox | None = None,
    *,
    hostname: str | None = None,
    own_pids: bool = False,
) -> subprocess.Popen:
    """Start ``argv`` with the pod's env and mounts (see ``mountns``), in the sandbox's network namespace when one
    is given, with ``hostname`` in a UTS namespace and in a PID namespace of its own when asked; output goes to
    ``log``."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    spec_file = root.parent / f"{root.name}.json"
    env = {**view.env, **(sandbox.service_env if sandbox else {})}
    netns = sandbox.netns_path if sandbox else None
    spec = Spec(
        root=str(root),
        argv=argv,
        env=env,
        mounts=view.mounts,
        cwd=view.cwd,
        netns=netns,
        hostname=hostname,
        own_pids=own_pids,
    )
    spec.dump(spec_file)
    launcher_env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return procs.spawn([sys.executable, "-m", "mmrl_local.node.mountns", str(spec_file)], log, env=launcher_env)
