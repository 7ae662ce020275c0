"""The hosts file a pod run for real resolves Service names and its own name with."""

from __future__ import annotations

from mmrl_local.network import etchosts


def pod(name="rc-w-worker-x", ip="10.244.128.7", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": "team"}, "spec": spec, "status": {"podIP": ip}}


def service(name: str, *, publish: bool = False, namespace: str = "team") -> dict:
    meta = {"name": name, "namespace": namespace}
    return {"metadata": meta, "spec": {"clusterIP": "None", "publishNotReadyAddresses": publish}}


def endpoint_slice(service: str, *endpoints: tuple[str, bool], namespace: str = "team") -> dict:
    labels = {"kubernetes.io/service-name": service}
    return {
        "metadata": {"name": f"{service}-abc", "namespace": namespace, "labels": labels},
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in endpoints],
    }


def entries(text: str) -> dict[str, str]:
    return {name: line.split("\t")[0] for line in text.splitlines() for name in line.split("\t")[1].split()}


def test_every_name_cluster_dns_answers_for_a_service_points_at_a_backing_pod() -> None:
    hosts = entries(
        etchosts.render(pod(), [service("rc-head-svc")], [endpoint_slice("rc-head-svc", ("10.244.128.1", True))])
    )
    for name in ("rc-head-svc", "rc-head-svc.team", "rc-head-svc.team.svc", "rc-head-svc.team.svc.cluster.local"):
        assert hosts[name] == "10.244.128.1"
    assert hosts["rc-w-worker-x"] == "10.244.128.7" and hosts["localhost"] == "::1"


def test_a_not_ready_endpoint_resolves_only_when_the_service_publishes_it() -> None:
    # KubeRay's head Service is headless with publishNotReadyAddresses: workers find the GCS before the head's
    # readiness probe (which needs the dashboard) passes.
    slices = [endpoint_slice("head", ("10.244.128.1", False)), endpoint_slice("web", ("10.244.128.9", False))]
    hosts = entries(etchosts.render(pod(), [service("head", publish=True), service("web")], slices))
    assert hosts["head"] == "10.244.128.1" and "web" not in hosts


def test_ready_endpoints_win_and_the_choice_is_stable() -> None:
    slices = [endpoint_slice("svc", ("10.244.128.5", False), ("10.244.128.4", True), ("10.244.128.3", True))]
    assert entries(etchosts.render(pod(), [service("svc", publish=True)], slices))["svc"] == "10.244.128.3"


def test_a_pod_with_hostname_and_subdomain_also_gets_its_fqdn() -> None:
    hosts = entries(etchosts.render(pod(hostname="h0", subdomain="sub"), [], []))
    assert hosts["h0.sub.team.svc.cluster.local"] == hosts["h0"] == hosts["rc-w-worker-x"] == "10.244.128.7"


def test_a_pod_without_an_ip_yet_gets_only_localhost() -> None:
    assert set(entries(etchosts.render(pod(ip=""), [], []))) == {"localhost", "ip6-localhost", "ip6-loopback"}


def test_services_of_other_namespaces_resolve_by_their_qualified_names_only() -> None:
    """As cluster DNS with a pod's search path: `svc.ns...` from anywhere, the bare name only in its namespace; and
    a Service's endpoints are its own namespace's, not those of a same-named Service elsewhere."""
    services = [service("head-svc"), service("head-svc", namespace="other"), service("ray", namespace="other")]
    slices = [
        endpoint_slice("head-svc", ("10.244.128.1", True)),
        endpoint_slice("head-svc", ("10.244.128.2", True), namespace="other"),
        endpoint_slice("ray", ("10.244.128.3", True), namespace="other"),
    ]
    hosts = entries(etchosts.render(pod(), services, slices))
    assert hosts["head-svc"] == hosts["head-svc.team.svc.cluster.local"] == "10.244.128.1"
    assert hosts["head-svc.other"] == hosts["head-svc.other.svc.cluster.local"] == "10.244.128.2"
    assert hosts["ray.other.svc"] == "10.244.128.3" and "ray" not in hosts
