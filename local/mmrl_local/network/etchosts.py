"""The /etc/hosts a pod that runs for real gets locally, in place of the cluster's DNS.

Pods here have no resolver: Ray's workers and KubeRay's submitter reach the head through its Service name
(``<cluster>-head-svc.<ns>.svc.cluster.local``), and Ray itself resolves the pod's hostname to learn its own IP.
So the local kubelet writes each pod a hosts file: localhost, the pod's own name (and ``hostname.subdomain`` FQDN
when it sets them), every Service of its namespace under all the names cluster DNS answers for it, and every Service
of the other namespaces under its qualified names (``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.cluster.local``; the bare
name only resolves in its own namespace, through the pod's DNS search path). KubeRay, in a namespace of its own,
reaches each Ray head's dashboard that way. With no
kube-proxy here a Service name maps straight to a backing pod's IP, the way a headless Service resolves: the ready
endpoints first, not-ready ones only when the Service publishes them. The file is rewritten in place as endpoints
change, so the bind mount in the pod sees every update.
"""

from __future__ import annotations

from typing import Any

CLUSTER_DOMAIN = "cluster.local"


def service_names(service: str, namespace: str, domain: str = CLUSTER_DOMAIN, *, short: bool = True) -> list[str]:
    """The names cluster DNS answers for a Service; ``short`` adds the bare name (a pod of the same namespace)."""
    qualified = [f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.{domain}"]
    return [service, *qualified] if short else qualified


def service_address(service: dict[str, Any], slices: list[dict[str, Any]]) -> str | None:
    """The pod IP a name lookup of ``service`` gives: its first ready endpoint (sorted, so stable), or a
    not-ready one when the Service sets publishNotReadyAddresses; None when it has none yet."""
    name, namespace = service["metadata"]["name"], service["metadata"].get("namespace")
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    ready, other = [], []
    for s in slices:
        if (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name") != name:
            continue
        if namespace and s["metadata"].get("namespace", namespace) != namespace:
            continue
        for endpoint in s.get("endpoints") or []:
            is_ready = (endpoint.get("conditions") or {}).get("ready") is not False
            (ready if is_ready else other).extend(endpoint.get("addresses") or [])
    chosen = sorted(ready) or (sorted(other) if publish else [])
    return chosen[0] if chosen else None


def render(pod: dict[str, Any], services: list[dict[str, Any]], slices: list[dict[str, Any]]) -> str:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    namespace, pod_ip = meta["namespace"], (pod.get("status") or {}).get("podIP") or ""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    own = [meta["name"]]
    if spec.get("hostname") and spec.get("subdomain"):
        own = [f"{spec['hostname']}.{spec['subdomain']}.{namespace}.svc.{CLUSTER_DOMAIN}", spec["hostname"], *own]
    if pod_ip:
        lines.append(f"{pod_ip}\t{' '.join(dict.fromkeys(own))}")

    def order(service: dict[str, Any]) -> tuple[bool, str, str]:  # the pod's own namespace first
        own_ns = service["metadata"].get("namespace", namespace)
        return (own_ns != namespace, own_ns, service["metadata"]["name"])

    for service in sorted(services, key=order):
        address = service_address(service, slices)
        own_ns = service["metadata"].get("namespace", namespace)
        if address:
            names = service_names(service["metadata"]["name"], own_ns, short=own_ns == namespace)
            lines.append(f"{address}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"
