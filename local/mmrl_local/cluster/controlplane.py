"""A real, throwaway Kubernetes control plane on loopback: etcd, kube-apiserver (TLS, RBAC, service-account
tokens), kube-controller-manager, kube-scheduler and kwok (fake kubelets), started from the binaries that
``mmrl_local.toolchain.build`` produced. ``ControlPlane`` owns every process it starts and stops them all, also on
interpreter exit or SIGTERM; see ``mmrl_local.common.procs``.

Before anything starts, the cluster's pod, service and node address ranges are blackholed on this host and what
killed runs left of their pod networks is removed (``podnet``). ``pod_network`` is this run's: the bridge the pods
that run for real are attached to, each in its own network namespace (None where this machine cannot make them;
``network_note`` says why in one line).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import ssl
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from kubernetes import client, config

from mmrl_local.cluster import crds
from mmrl_local.common import certs, procs
from mmrl_local.network import podnet
from mmrl_local.network.podnet import KWOK_POD_CIDR, NODE_IP, SERVICE_CIDR
from mmrl_local.toolchain import build

# Requests of the service accounts in this namespace are written to the audit log (``ControlPlane.audit_log``):
# RBAC tests run the operator there under its chart's ServiceAccount and read back every request it made.
AUDITED_NAMESPACE = "mmrl-audited"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{AUDITED_NAMESPACE}"]},
        {"level": "None"},
    ],
}
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
# user -> organization of the client certificates; each component gets the identity RBAC bootstraps for it.
CLIENTS = {
    "admin": "system:masters",
    "system:kube-controller-manager": None,
    "system:kube-scheduler": None,
    "kwok": "system:masters",
}
# The control plane's Go processes collect garbage a quarter as often as Go's default (GOGC=100): a test session's
# apiserver spent about a fifth of its CPU in the collector. tests/cluster/test_hyperpod_recovery.py, one worker:
# kube-apiserver 36.4 -> 26.0 CPU-s, its peak RSS 0.76 -> 1.38 GB, which GOMEMLIMIT caps (the collector works
# harder near it instead of growing further). A GOGC of the caller's wins.
GO_GC = {"GOGC": "400"}
APISERVER_GO_GC = {**GO_GC, "GOMEMLIMIT": "1536MiB"}


_LISTEN_PORTS_FROM = 10000  # below: well-known and registered ports people run things on


def _ephemeral_start() -> int:
    """The first port of the kernel's range for outgoing connections' local ports."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now, for a server this process starts next. Not from the kernel's ephemeral range
    (`bind(0)` picks one there): a port released there can be taken at once as the local port of any outgoing
    connection, and the server's bind then fails with EADDRINUSE (seen: an operator's metrics port, under a full
    parallel test run). A random pick below that range collides only with another picker's same pick, which the
    trial bind catches when that one already listens."""
    top = _ephemeral_start()
    for _ in range(100):
        port = random.randrange(_LISTEN_PORTS_FROM, top)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_LISTEN_PORTS_FROM}-{top - 1} after 100 tries")


def stage_documents() -> str:
    """All kwok Stage files shipped in ``mmrl_local/stages`` as one multi-document YAML."""
    files = sorted(
        p for p in resources.files("mmrl_local.cluster").joinpath("stages").iterdir() if p.name.endswith(".yaml")
    )
    return "\n---\n".join(p.read_text() for p in files)


def remove_stale_workdirs() -> None:
    """Delete temp dirs left by control planes whose owner was SIGKILLed (its children died with it)."""
    for workdir in Path(tempfile.gettempdir()).glob("mmrl-cp-*"):
        with contextlib.suppress(FileNotFoundError, ValueError):
            if not procs.pid_alive(int((workdir / "owner.pid").read_text())):
                shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class ControlPlane:
    """Start with ``start()`` (or as a context manager); ``kubeconfig`` is the admin kubeconfig."""

    binaries: build.Binaries | None = None
    workdir: Path | None = None
    install_kuberay_crds: bool = True
    keep_workdir: bool = False
    audit_log: Path | None = None
    """The apiserver's audit log (one JSON line per request: who, verb, resource, user agent). By default it is
    `<workdir>/audit.log` and holds only the requests of service accounts in AUDITED_NAMESPACE; when a path is
    given here it holds every request (the benchmarks count a process's API calls with it)."""
    procs: dict[str, object] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    pod_network: podnet.PodNetwork | None = None
    network_note: str = ""

    def __post_init__(self) -> None:
        self._own_workdir = self.workdir is None
        self.workdir = Path(self.workdir or tempfile.mkdtemp(prefix="mmrl-cp-"))
        self.kubeconfig = self.workdir / "kubeconfig"
        self.audit_everything = self.audit_log is not None
        self.audit_log = self.audit_log or self.workdir / "audit.log"
        self.etcd_port = free_port()
        self.api_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"

    # -- lifecycle -------------------------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def start(self, timeout: float = 60.0) -> ControlPlane:
        t0 = time.monotonic()
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = round(time.monotonic() - t0, 2)
        return self

    def _start(self, timeout: float) -> None:
        t0 = time.monotonic()
        remove_stale_workdirs()
        (self.workdir / "owner.pid").write_text(str(os.getpid()))
        self._prepare_network()
        self.binaries = self.binaries or build.build()
        self.pki = certs.generate(self.workdir / "pki", CLIENTS, server_ips=(podnet.GATEWAY,))
        for user in CLIENTS:
            self._write_kubeconfig(user)
        shutil.copy(self.workdir / "admin.kubeconfig", self.kubeconfig)
        self.timings["pki"] = round(time.monotonic() - t0, 2)
        self._spawn("etcd", self._etcd_args())
        self._spawn("kube-apiserver", self._apiserver_args())
        self._wait_readyz(timeout)
        self.timings["apiserver_ready"] = round(time.monotonic() - t0, 2)
        if self.install_kuberay_crds:
            # Before the controller-manager starts: its GC and quota controllers would otherwise re-run
            # discovery for the new types while the apiserver is busy building their OpenAPI.
            crds.install(self.api_client(), build.kuberay_crd_paths(), build.cache_root() / "crds")
            self.timings["crds"] = round(time.monotonic() - t0, 2)
        self._spawn("kube-controller-manager", self._controller_manager_args())
        self._spawn("kube-scheduler", self._scheduler_args())
        stages = self.workdir / "kwok-stages.yaml"
        stages.write_text(stage_documents())
        self._spawn("kwok", self._kwok_args(stages))
        self._wait_default_service_account(timeout)
        if not self.network_note:
            self.pod_network = podnet.PodNetwork(("127.0.0.1", self.api_port), self.workdir).start()
            self.pod_network.watch(self.api_client())

    def _prepare_network(self) -> None:
        """Routes first, so nothing this run dials can leave the machine; then what killed runs left behind."""
        self.network_note = podnet.install_routes() or ""
        reason = podnet.unavailable_reason()
        if reason is not None:
            self.network_note = f"pods do not get their own network namespaces here: {reason}"
            return
        removed = podnet.remove_leftovers()
        if removed:
            self.timings["removed_network_leftovers"] = len(removed)

    def stop(self) -> None:
        """Stop everything this control plane started (all at once: one grace period) and remove its temp dir."""
        if self.pod_network is not None:
            self.pod_network.close()  # stops the pods' processes while the apiserver still answers them
            self.pod_network = None
        procs.stop_together(list(reversed(self.procs.values())))
        if self._own_workdir and not self.keep_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- clients ---------------------------------------------------------------------------------------------

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig), "PATH": f"{self.binaries.dir}{os.pathsep}{os.environ['PATH']}"}

    # -- processes -------------------------------------------------------------------------------------------

    def log(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def _spawn(self, name: str, args: list[str]) -> None:
        gc = APISERVER_GO_GC if name == "kube-apiserver" else GO_GC
        env = os.environ if "GOGC" in os.environ else {**os.environ, **gc}
        self.procs[name] = procs.spawn(
            [str(self.binaries[name]), *args], self.log(name), env=dict(env), cwd=self.workdir
        )

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = self.log(name).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}; last log lines:\n{tail}")

    def _etcd_args(self) -> list[str]:
        peer = f"http://127.0.0.1:{free_port()}"
        url = f"http://127.0.0.1:{self.etcd_port}"
        return [
            "--name=default",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--listen-metrics-urls=",
            # Throwaway data: skipping fsync makes every write (and so every test) much faster.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_args(self) -> list[str]:
        pki = self.pki
        policy = self.workdir / "audit-policy.yaml"
        everything = {**AUDIT_POLICY, "rules": [{"level": "Metadata"}]}
        policy.write_text(yaml.safe_dump(everything if self.audit_everything else AUDIT_POLICY))
        return [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--secure-port={self.api_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            # As on clusters that enable it: setting blockOwnerDeletion needs `update` on the owner's finalizers,
            # so the operator's RBAC is tested against the stricter rule.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            # Webhooks (Kueue's) are called at their Service's endpoints, the pod IP, not its cluster IP: nothing
            # here routes cluster IPs from the host.
            "--enable-aggregator-routing=true",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            # The local kubelet's nodes serve pods/log on loopback (kubelet_logs); kwok's nodes serve no logs.
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
            "--profiling=false",
            "--audit-log-format=json",
            "--v=1",
        ]

    def _controller_manager_args(self) -> list[str]:
        pki = self.pki
        return [
            f"--kubeconfig={self.workdir / 'system:kube-controller-manager.kubeconfig'}",
            "--secure-port=0",
            "--leader-elect=false",
            # One token per controller, so RBAC denials name the controller, as on a real cluster.
            "--use-service-account-credentials=true",
            f"--root-ca-file={pki.ca_cert}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--cluster-signing-cert-file={pki.ca_cert}",
            f"--cluster-signing-key-file={pki.ca_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*",
            "--v=1",
        ]

    def _scheduler_args(self) -> list[str]:
        return [
            f"--kubeconfig={self.workdir / 'system:kube-scheduler.kubeconfig'}",
            "--secure-port=0",
            "--leader-elect=false",
            "--v=1",
        ]

    def _kwok_args(self, stages: Path) -> list[str]:
        return [
            f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
            f"--config={stages}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={podnet.slice_of(KWOK_POD_CIDR)}",
            f"--node-ip={NODE_IP}",
            f"--server-address=127.0.0.1:{free_port()}",
            "--node-lease-duration-seconds=40",
            "--v=INFO",
        ]

    # -- readiness -------------------------------------------------------------------------------------------

    def _wait_readyz(self, timeout: float) -> None:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        crt, key = self.pki.client("admin")
        ctx.load_cert_chain(str(crt), str(key))
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=2) as resp,
            ):
                if resp.status == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"kube-apiserver not ready after {timeout}s; see {self.log('kube-apiserver')}")
            time.sleep(0.1)

    def _wait_default_service_account(self, timeout: float) -> None:
        # The controller-manager's serviceaccount controller creating "default" proves it runs with working
        # credentials; pods cannot be created in a namespace before that (ServiceAccount admission).
        core = client.CoreV1Api(self.api_client())
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            with contextlib.suppress(client.ApiException):
                core.read_namespaced_service_account("default", "default")
                return
            if time.monotonic() > deadline:
                raise TimeoutError("kube-controller-manager did not create the default ServiceAccount")
            time.sleep(0.1)

    def _write_kubeconfig(self, user: str) -> Path:
        crt, key = self.pki.client(user)
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "mmrl-local",
                    "cluster": {"server": self.server, "certificate-authority": str(self.pki.ca_cert)},
                }
            ],
            "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
            "contexts": [{"name": "mmrl-local", "context": {"cluster": "mmrl-local", "user": user}}],
            "current-context": "mmrl-local",
        }
        path = self.workdir / f"{user}.kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        return path
