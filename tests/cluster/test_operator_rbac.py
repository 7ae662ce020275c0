"""The chart's RBAC is enough and no more: the operator, authenticated as the chart's ServiceAccount (a bound token;
the local apiserver enforces RBAC and OwnerReferencesPermissionEnforcement), runs a job to success and the audit
log shows no request refused; and the apiserver's own authorizer, asked as that ServiceAccount, allows exactly what
`rbac.PERMISSIONS` declares, in both install modes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from mmrl_operator.runtime.permissions import ALL_VERBS, CORE, PERMISSIONS, RBAC, Rule
from tests.support.audit import requests_by
from tests.support.chart import ChartIdentity
from tests.support.jobspecs import cluster_job
from tests.support.operator import OperatorProcess, phases_until_done

pytestmark = pytest.mark.cluster

MODES = ("namespaced", "cluster-wide")
# Resources outside the table that an operator must never reach, checked with every verb.
FORBIDDEN = (
    (CORE, "pods/exec"),
    (CORE, "pods/log"),
    (CORE, "serviceaccounts/token"),
    (CORE, "namespaces"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    (CORE, "nodes/proxy"),
    (RBAC, "clusterroles"),
    (RBAC, "clusterrolebindings"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
)

# Verbs that escalate through a resource rather than act on it.
EXTRA_VERBS = {
    "roles": ("bind", "escalate"),
    "clusterroles": ("bind", "escalate"),
    "serviceaccounts": ("impersonate",),
}


@pytest.fixture
def chart_identity(
    api_client, cluster_helm, audited_namespace, namespace, tmp_path, request
) -> Iterator[ChartIdentity]:
    watch = [namespace] if request.param == "namespaced" else []
    identity = ChartIdentity(api_client, cluster_helm, audited_namespace, watch, tmp_path)
    yield identity
    identity.delete()


@pytest.mark.parametrize("chart_identity", MODES, indirect=True)
def test_operator_runs_a_job_to_success_with_only_the_charts_rbac(
    chart_identity: ChartIdentity, control_plane, jobs, kuberay, nodes_ready, tmp_path
) -> None:
    ident = chart_identity
    env = {"POD_NAMESPACE": ident.namespace, "MMRL_LEASE_NAME": ident.lease}
    log = tmp_path / "operator.log"
    with OperatorProcess(ident.kubeconfig, log, standalone=False, namespaces=ident.watch, env=env) as op:
        kuberay.script("geo-a*", "succeed-after=1")
        jobs.create(cluster_job("geo"))
        seen = phases_until_done(jobs, "geo")
        assert seen[-1] == "Succeeded" and "Running" in seen, seen
        assert op.metric("mmrl_reconcile_errors_total") == 0
    made = requests_by(control_plane.audit_log, ident.username)
    # Refused by the authorizer. Cluster-wide, the operator also acts on other tests' jobs on this control plane; a
    # write into one of their namespaces while it is being deleted is refused by admission (403, authorized).
    refused = sorted({(r.code, *r.permission, r.namespace) for r in made if r.code in (401, 403) and not r.authorized})
    assert refused == [], f"the apiserver refused the operator: {refused}"
    assert all(r.authorized for r in made if r.code < 400)  # the audit log carries the authorizer's decision
    # The lifecycle used the chart's grants: reads, watches, applies of every child kind, status and the Lease.
    used = {r.permission for r in made}  # authorized, whatever the answer (the first Lease read is a 404)
    for expected in [
        ("", "nodes", "list"),
        ("", "pods", "watch"),
        ("ray.io", "rayclusters", "patch"),
        ("ray.io", "rayjobs", "watch"),
        ("mmrl.dev", "multimodalrljobs/status", "patch"),
        ("rbac.authorization.k8s.io", "roles", "patch"),
        ("", "events", "create"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
    ]:
        assert expected in used, f"{expected} not seen among {sorted(used)}"


def expected_allowed(
    rule_set: tuple[Rule, ...],
    verb: str,
    group: str,
    resource: str,
    namespace: str | None,
    name: str | None,
    *,
    release_ns: str,
    watch: list[str],
    lease: str,
) -> bool:
    """What the table says the chart grants: ClusterRole rules apply everywhere, Role rules in their namespace."""
    for rule in rule_set:
        if (rule.group, rule.resource) != (group, resource) or verb not in rule.verbs:
            continue
        if rule.named and name != lease:
            continue
        if rule.scope == "cluster" or (rule.scope == "watched" and not watch):
            return True
        if rule.scope == "watched" and namespace in watch:
            return True
        if rule.scope == "own" and namespace == release_ns:
            return True
    return False


@pytest.mark.parametrize("chart_identity", MODES, indirect=True)
def test_charts_service_account_is_allowed_exactly_what_the_table_declares(
    chart_identity: ChartIdentity, namespace: str, other_namespace: str
) -> None:
    ident = chart_identity
    cluster_scoped = {(r.group, r.resource) for r in PERMISSIONS if r.scope == "cluster"}
    cases = []
    for group, resource in sorted({(r.group, r.resource) for r in PERMISSIONS} | set(FORBIDDEN)):
        scoped = [None] if (group, resource) in cluster_scoped else [namespace, other_namespace, ident.namespace, None]
        names = [None, ident.lease, "someone-elses"] if resource == "leases" else [None]
        verbs = [*ALL_VERBS, *EXTRA_VERBS.get(resource, ())]
        cases += [(verb, group, resource, ns, name) for ns in scoped for name in names for verb in verbs]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda case: ident.can(*case), cases))
    mismatches = []
    for case, got in zip(cases, answers, strict=True):
        want = expected_allowed(PERMISSIONS, *case, release_ns=ident.namespace, watch=ident.watch, lease=ident.lease)
        if got != want:
            mismatches.append(f"{case}: the apiserver says allowed={got}, the table {want}")
    assert mismatches == [], "\n".join(mismatches)
    assert len(cases) > 500 and any(answers)
    # The headline promises, spelled out.
    # Secrets: only a ModelServer's admin key is made and read back, in the watched namespaces (all of them when the
    # operator watches the cluster); never listed, watched, changed or deleted.
    for ns in (namespace, other_namespace, ident.namespace, None):
        granted = [v for v in ALL_VERBS if ident.can(v, "", "secrets", ns)]
        assert granted == (["get", "create"] if not ident.watch or ns == namespace else []), (ns, granted)
    assert [v for v in ALL_VERBS if ident.can(v, "", "nodes", None)] == ["get", "list", "watch"]
    assert ident.can("list", "", "pods", namespace)
    assert ident.can("list", "", "pods", other_namespace) is (not ident.watch)
    assert not ident.can("escalate", RBAC, "roles", namespace) and not ident.can("bind", RBAC, "roles", namespace)
