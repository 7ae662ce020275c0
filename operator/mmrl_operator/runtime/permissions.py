"""Every Kubernetes permission the operator holds, declared once: the chart's RBAC is generated from this table and
the code's API calls are checked against it.

`Kube` and `LeaderElector` call `require(group, resource, verb)` before each request, so a call the table does not
declare fails in the tests that make it instead of as a 403 in someone's cluster; kopf's watches are checked
against it from kopf's handler registry (tests/unit/operator/test_rbac.py). `mmrl_operator.codegen.chart` turns it into
the chart's ClusterRole, per-namespace Roles and the leader-election Role.

Scopes say where a rule is granted:
- `cluster`: cluster-scoped resources, always through a ClusterRole;
- `watched`: namespaced resources in the namespaces the operator watches: a ClusterRole when it watches the whole
  cluster, one Role per namespace when the chart's `watchNamespaces` lists them;
- `own`: the operator's own namespace (its leader-election Lease), a Role there; `named` rules are limited to
  the Lease's name with resourceNames.

No wildcards, nodes read-only, and of Secrets only what a ModelServer's admin key needs (create, and get by name;
no list, watch, update or delete): the tests hold the table to that. `mmrl status` (cli/status.py) is not
the operator: it runs with the credentials of whoever types it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mmrl_api import constants as c

Scope = Literal["cluster", "watched", "own"]
CORE, APPS, RBAC, COORDINATION = "", "apps", "rbac.authorization.k8s.io", "coordination.k8s.io"
NETWORKING = "networking.k8s.io"
# Kubernetes' verbs on resources; a verb of these that a rule does not list is one the operator must not hold.
ALL_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# Server-side apply is a PATCH; the apiserver also authorizes `create` when the object does not exist yet. Every
# child is read by name (`get`) before the first write, so an object the job does not control is never applied; the
# trainer identity (`mmrl-trainer`) is the operator's by name in every namespace, and known from its watches.
APPLY = ("create", "patch")


@dataclass(frozen=True)
class Rule:
    group: str
    resource: str  # plural, with "/subresource" for a subresource
    verbs: tuple[str, ...]
    scope: Scope
    why: str
    named: bool = False  # only the operator's own object (the Lease), by resourceNames

    @property
    def resource_name(self) -> str:
        return self.resource.split("/", 1)[0]


PERMISSIONS: tuple[Rule, ...] = (
    # --- cluster-scoped ---------------------------------------------------------------------------------------
    Rule(CORE, "nodes", ("get", "list", "watch"), "cluster", "HyperPod node health: watch cache, priming list, get"),
    # --- the job ----------------------------------------------------------------------------------------------
    Rule(c.GROUP, c.PLURAL, ("get", "list", "watch"), "watched", "jobs: watched by kopf, read fresh on every pass"),
    Rule(
        c.GROUP,
        f"{c.PLURAL}/status",
        ("patch",),
        "watched",
        "status writes; also what the trainer Role grants (held, so no escalate)",
    ),
    Rule(
        c.GROUP,
        f"{c.PLURAL}/finalizers",
        ("update",),
        "watched",
        "children carry blockOwnerDeletion owner references to their job",
    ),
    # --- shared servers -----------------------------------------------------------------------------------------
    Rule(
        c.GROUP,
        c.SERVER_PLURAL,
        ("get", "list", "watch"),
        "watched",
        "ModelServers: the controller's informer; a job's pass reads the server it names",
    ),
    Rule(c.GROUP, f"{c.SERVER_PLURAL}/status", ("patch",), "watched", "ModelServer status writes"),
    Rule(
        c.GROUP,
        f"{c.SERVER_PLURAL}/finalizers",
        ("update",),
        "watched",
        "a server's Deployment and Service carry blockOwnerDeletion owner references to it",
    ),
    # --- children -----------------------------------------------------------------------------------------------
    Rule(c.RAY_GROUP, "rayclusters", ("get", "list", "watch", *APPLY, "delete"), "watched", "the job's Ray cluster"),
    Rule(c.RAY_GROUP, "rayjobs", ("get", "list", "watch", *APPLY, "delete"), "watched", "one RayJob per attempt"),
    Rule(
        CORE,
        "pods",
        ("get", "list", "watch", "delete"),
        "watched",
        "Ray pods: node lookups, moving pods off failing nodes",
    ),
    Rule(CORE, "events", ("create",), "watched", "Events on jobs"),
    Rule(CORE, "configmaps", ("get", *APPLY), "watched", "the trainer's config"),
    Rule(
        CORE,
        "serviceaccounts",
        ("list", "watch", *APPLY),
        "watched",
        "each namespace's trainer identity mmrl-trainer (watched by name), with the platform's annotations",
    ),
    Rule(
        RBAC,
        "roles",
        ("list", "watch", *APPLY),
        "watched",
        "the trainer identity's Role (watched by name): patch job status (held above, no escalate)",
    ),
    Rule(
        RBAC,
        "rolebindings",
        ("list", "watch", *APPLY),
        "watched",
        "binds the trainer identity's Role (watched by name; its rules are held above, no bind)",
    ),
    Rule(
        NETWORKING,
        "networkpolicies",
        ("get", *APPLY),
        "watched",
        "the job's NetworkPolicy: only its own pods, its submitter and KubeRay reach its Ray pods",
    ),
    Rule(APPS, "deployments", ("get", "list", "watch", *APPLY, "delete"), "watched", "serving: the vLLM Deployment"),
    Rule(
        APPS,
        "replicasets",
        ("get",),
        "watched",
        "shared serving: a pod is a replica only if its ReplicaSet is the server's Deployment's (the admin key)",
    ),
    Rule(CORE, "services", ("get", "list", "watch", *APPLY, "delete"), "watched", "serving: the vLLM Service"),
    Rule(CORE, "services/proxy", ("get",), "watched", "serving: ask vLLM's /v1/models through the apiserver"),
    Rule(
        CORE,
        "pods/status",
        ("patch",),
        "watched",
        "shared servers: a replica's readiness gate, True once it holds every adapter the server serves",
    ),
    Rule(
        CORE,
        "pods/proxy",
        ("get", "create"),
        "watched",
        "shared servers: list, load and unload adapters through each ModelServer replica's gateway",
    ),
    Rule(
        CORE,
        "secrets",
        ("get", "create"),
        "watched",
        "shared servers: make each ModelServer's admin-key Secret and read it back by name (no list, no watch)",
    ),
    # --- the operator's own namespace -------------------------------------------------------------------------
    Rule(
        c.KUEUE_GROUP,
        "workloads",
        ("list",),
        "watched",
        "Kueue: a deleted RayCluster is recreated only once Kueue removed its Workload",
    ),
    Rule(COORDINATION, "leases", ("create",), "own", "leader election: create the Lease (cannot be name-limited)"),
    Rule(COORDINATION, "leases", ("get", "update"), "own", "leader election: read and renew the Lease", named=True),
)


class Undeclared(RuntimeError):
    """The code is about to make a request the table does not declare, so the chart would not grant it."""


def _declared() -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for rule in PERMISSIONS:
        found.setdefault((rule.group, rule.resource), set()).update(rule.verbs)
    return found


DECLARED = _declared()


def require(group: str, resource: str, *verbs: str) -> None:
    """Raise `Undeclared` unless PERMISSIONS grants every verb on group/resource."""
    missing = [v for v in verbs if v not in DECLARED.get((group, resource), ())]
    if missing:
        where = f"{group}/{resource}" if group else resource
        raise Undeclared(
            f"the operator calls {', '.join(missing)} on {where}, which mmrl_operator.runtime.permissions.PERMISSIONS "
            "does not declare; add it there (the chart's RBAC is generated from it) and run `make crds`"
        )


def rules_for(scope: Scope, named: bool | None = None) -> list[Rule]:
    return [r for r in PERMISSIONS if r.scope == scope and (named is None or r.named == named)]
