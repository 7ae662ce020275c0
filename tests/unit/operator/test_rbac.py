"""The operator's permission table (mmrl_operator.runtime.permissions) is least privilege and covers what the code
does: every API call in kube.py and leader.py names its permission, kopf's watches, every child kind the builders
produce and the reconcile deletes, and every permission the operator grants its trainers (it holds them, so no
`escalate`)."""

from __future__ import annotations

import ast
from pathlib import Path

import kopf
import pytest

import mmrl_operator.runtime.handlers  # noqa: F401  (registers the kopf handlers)
from mmrl_api import constants as c
from mmrl_operator.core.builders.common import owner_reference
from mmrl_operator.core.builders.identity import build_trainer_identity
from mmrl_operator.core.builders.network_policy import NetworkPolicySettings, build_network_policy
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.rayjob import build_rayjob
from mmrl_operator.core.builders.trainer_config import build_config_map
from mmrl_operator.core.observed import ServingObserved
from mmrl_operator.core.serving import children_to_remove
from mmrl_operator.runtime import caches, identity
from mmrl_operator.runtime import permissions as rbac
from tests.support.factories import job

RUNTIME = Path(rbac.__file__).parent
OPERATOR = RUNTIME.parent


def plural(kind: str) -> str:
    lower = kind.lower()  # true of every kind the operator handles (Service, Deployment, RayJob, NetworkPolicy, ...)
    return lower[:-1] + "ies" if lower.endswith("y") else lower + "s"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def test_the_table_has_no_wildcards_read_only_nodes_and_secrets_only_made_and_read_by_name() -> None:
    for rule in rbac.PERMISSIONS:
        assert "*" not in (rule.group, rule.resource, *rule.verbs), rule
        assert set(rule.verbs) <= set(rbac.ALL_VERBS), rule
        assert rule.why, rule
    # A ModelServer's admin key: created and read back by name; never listed, watched, changed or deleted.
    secrets = [(r.resource, r.verbs, r.scope) for r in rbac.PERMISSIONS if r.resource_name == "secrets"]
    assert secrets == [("secrets", ("get", "create"), "watched")]
    nodes = [r for r in rbac.PERMISSIONS if r.resource_name == "nodes"]
    assert [(r.resource, r.verbs) for r in nodes] == [("nodes", ("get", "list", "watch"))]
    assert all(r.scope == "own" for r in rbac.PERMISSIONS if r.resource == "leases")


def test_require_refuses_a_call_the_table_does_not_declare() -> None:
    rbac.require("", "pods", "list", "delete")
    with pytest.raises(rbac.Undeclared, match="list on secrets"):
        rbac.require("", "secrets", "get", "list")
    with pytest.raises(rbac.Undeclared, match="update on pods"):
        rbac.require("", "pods", "list", "update")


def test_every_resource_the_operator_watches_is_declared_for_list_and_watch() -> None:
    # kopf has no public accessor for its registered watchers; the registry's own attribute is read here.
    selectors = [h.selector for h in kopf.get_default_registry()._watching.get_all_handlers()]
    watched = {(s.group, s.any_name) for s in selectors}
    assert (c.GROUP, c.PLURAL) in watched
    informed = {(k.group, k.plural) for k in (caches.NODES, *(kind for kind, _ in caches.KINDS.values()))}
    informed |= {(k.group, k.plural) for k in identity.KINDS.values()}  # each namespace's mmrl-trainer, by name
    children = {("", "pods"), (c.RAY_GROUP, "rayjobs"), (c.RAY_GROUP, "rayclusters"), ("apps", "deployments")}
    assert {("", "nodes"), ("", "services"), *children} <= informed
    for group, resource in watched | informed:
        rbac.require(group, resource, "list", "watch")


def test_every_object_the_operator_applies_is_declared_for_create_and_patch() -> None:
    j = job()
    identity = build_trainer_identity(j.namespace, {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"})
    for obj in identity:  # the operator's by name and watched: never read one by one
        rbac.require(group_of(obj["apiVersion"]), plural(obj["kind"]), *rbac.APPLY)
    policy = build_network_policy(j, NetworkPolicySettings())
    for obj in [build_config_map(j), build_raycluster(j), build_rayjob(j, 1), policy]:
        assert obj is not None
        # A child's name is read before its first write (NameConflict), so `get` too.
        rbac.require(group_of(obj["apiVersion"]), plural(obj["kind"]), "get", *rbac.APPLY)


def _calls(path: Path, name: str) -> list[ast.Call]:
    tree = ast.parse(path.read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name]


def test_every_kind_the_reconcile_deletes_is_declared_for_delete() -> None:
    deletes = [call for module in sorted(OPERATOR.rglob("*.py")) for call in _calls(module, "Delete")]
    kinds = {ast.literal_eval(call.args[1]) for call in deletes if isinstance(call.args[1], ast.Constant)}
    # Serving removes its Deployment and Service (what reconcile turns into Deletes with variable arguments).
    kinds |= {kind for _, kind, _ in children_to_remove(job(), ServingObserved(deployment={}, service={}))}
    assert kinds == {"RayJob", "RayCluster", "Pod", "Deployment", "Service"}
    groups = {
        "RayJob": c.RAY_GROUP,
        "RayCluster": c.RAY_GROUP,
        "Pod": rbac.CORE,
        "Deployment": rbac.APPS,
        "Service": rbac.CORE,
    }
    for kind in kinds:
        rbac.require(groups[kind], plural(kind), "delete")


@pytest.mark.parametrize("module", ["kube.py", "leader.py"])
def test_every_api_call_in_the_module_checks_the_table_first(module: str) -> None:
    """A method that talks to the apiserver (typed clients, the dynamic client) must call `require` or go
    through `_resource(..., verbs)`, which does."""
    tree = ast.parse((RUNTIME / module).read_text())
    clients = {"core", "custom", "api", "dyn"}
    unchecked = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        if fn.name in ("__init__", "_resource", "serves"):  # construction; the checker itself; discovery (no RBAC)
            continue
        attrs = [n for n in ast.walk(fn) if isinstance(n, ast.Attribute)]
        talks = any(isinstance(a.value, ast.Attribute) and a.value.attr in clients for a in attrs)
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
        checks = any(getattr(n.func, "id", None) == "require" for n in calls) or any(
            getattr(n.func, "attr", None) == "_resource" and len(n.args) >= 3 for n in calls
        )
        if talks and not checks:
            unchecked.append(fn.name)
    assert unchecked == [], f"{module}: API calls not checked against rbac.PERMISSIONS in {unchecked}"


def test_the_operator_holds_every_permission_it_grants_a_trainer() -> None:
    """RBAC lets a subject create a Role only with permissions it holds itself (or `escalate`, which the table never
    grants): the trainer's Role must fit inside the operator's namespaced rules."""
    (role,) = [o for o in build_trainer_identity("team", {}) if o["kind"] == "Role"]
    watched = {(r.group, r.resource): set(r.verbs) for r in rbac.rules_for("watched")}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert set(rule["verbs"]) <= watched.get((group, resource), set()), (group, resource)
    assert not any(v in ("bind", "escalate") for r in rbac.PERMISSIONS for v in r.verbs)


def test_block_owner_deletion_is_backed_by_update_on_the_jobs_finalizers() -> None:
    assert owner_reference(job())["blockOwnerDeletion"] is True
    rbac.require(c.GROUP, f"{c.PLURAL}/finalizers", "update")


def test_the_install_guide_lists_exactly_the_table() -> None:
    doc = (OPERATOR.parents[1] / "docs" / "install.md").read_text()
    section = doc.split("## RBAC", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[2] and cells[0] not in ("group", "---"):
            group = "" if cells[0] == "core" else cells[0]
            resource, named = cells[1].split(" ")[0], "(resourceNames" in cells[1]
            rows.append((group, resource, tuple(v.strip() for v in cells[2].split(",")), cells[3], named))
    table = [(r.group, r.resource, r.verbs, r.scope, r.named) for r in rbac.PERMISSIONS]
    assert sorted(rows) == sorted(table)
