"""The trainers' identity in one namespace: ServiceAccount, Role and RoleBinding `mmrl-trainer`.

One per namespace, not one per job (docs/adr/0008-trainer-identity-per-namespace.md): a fixed name is what an EKS Pod
Identity association can name, the platform's IRSA annotations go on it once, and a new job costs no RBAC objects.
The Role grants only `patch` on job status, in every job of the namespace; the trainer status policy
(codegen/trainer_status_policy.py) narrows each token to the job whose Ray pod it is bound to, and to the trainer's
status fields. The trainer never reads its job (mmrl_trainer/progress.py only patches), so no read is granted.

The objects belong to the namespace, not to a job: no owner reference (they outlive every job), only the managed-by
label. The digest of what the operator sets (`stamped`) is on each, so the operator can tell from its watch cache
whether an object is as it builds it, and apply it only when not (`differs`).
"""

from __future__ import annotations

from typing import Any

from mmrl_api import constants as c
from mmrl_operator.core.builders.common import SPEC_HASH_ANNOTATION, spec_hash
from mmrl_operator.core.names import TRAINER_IDENTITY

RBAC_API = "rbac.authorization.k8s.io/v1"
COMPONENT = "trainer-identity"
TRAINER_RULES = [{"apiGroups": [c.GROUP], "resources": [f"{c.PLURAL}/status"], "verbs": ["patch"]}]
"""What a trainer may do with the API: patch job status (the policy says which job and which fields)."""


def _metadata(namespace: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": TRAINER_IDENTITY,
        "namespace": namespace,
        "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_COMPONENT: COMPONENT},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def build_trainer_identity(namespace: str, annotations: dict[str, str]) -> list[dict[str, Any]]:
    """ServiceAccount (with the platform's annotations, e.g. IRSA's role ARN), Role and RoleBinding, in the order
    they can be applied: the binding's Role must exist for RBAC to accept it without `bind`."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(namespace, annotations)}
    role = {"apiVersion": RBAC_API, "kind": "Role", "metadata": _metadata(namespace), "rules": TRAINER_RULES}
    binding = {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": _metadata(namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TRAINER_IDENTITY},
        "subjects": [{"kind": "ServiceAccount", "name": TRAINER_IDENTITY, "namespace": namespace}],
    }
    return [_stamped(account), _stamped(role), _stamped(binding)]


# What each kind carries besides metadata: all of it is the operator's.
BODY_FIELDS = {"ServiceAccount": (), "Role": ("rules",), "RoleBinding": ("roleRef", "subjects")}


def _stamped(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the digest of everything the operator sets on it: an annotation the platform stops setting changes
    the digest, so the object is applied again and server-side apply removes the annotation."""
    meta = obj["metadata"]
    body = {f: obj[f] for f in BODY_FIELDS[obj["kind"]]}
    digest = spec_hash({"labels": meta["labels"], "annotations": meta.get("annotations") or {}, **body})
    meta["annotations"] = {**(meta.get("annotations") or {}), SPEC_HASH_ANNOTATION: digest}
    return obj


def differs(desired: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """Whether `current` (the object as the cluster has it, or None) is not what `desired` sets: missing, built from
    other settings (its digest), or edited since (a label, an annotation or the body changed by someone else).
    Labels and annotations others add are theirs and do not count."""
    if current is None:
        return True
    want, have = desired["metadata"], current.get("metadata") or {}
    for field in ("labels", "annotations"):
        mine, theirs = want.get(field) or {}, have.get(field) or {}
        if any(theirs.get(k) != v for k, v in mine.items()):  # the digest among them
            return True
    return any(current.get(f) != desired.get(f) for f in BODY_FIELDS[desired["kind"]])
