"""Each namespace's trainer identity (`mmrl-trainer`: core/builders/identity.py), kept as the platform configured it.

The platform's settings come from a file the chart renders from its `trainerIdentity` values and mounts into the
operator's pod (`--trainer-identity` / MMRL_TRAINER_IDENTITY_FILE): annotations for every namespace's ServiceAccount
(IRSA's `eks.amazonaws.com/role-arn`, say), or per namespace instead. Nothing in a job chooses an identity.

A job's pass asks `due(namespace)` for the identity objects that are missing or not as built, and applies those
(runtime/reconcile.py). What exists is known from watches of the three kinds, limited to the name `mmrl-trainer` by a
field selector, so a namespace whose identity is in place costs its jobs no request. A change of one of them (a
tenant's edit or delete) that leaves it other than built wakes a job of that namespace, whose pass puts it back:
server-side apply with force, so the annotation keys the platform sets stay the platform's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mmrl_operator.core.builders.identity import BODY_FIELDS, build_trainer_identity, differs
from mmrl_operator.core.names import TRAINER_IDENTITY
from mmrl_operator.runtime.informer import Informer, Kind, Obj
from mmrl_operator.runtime.kube import Kube

log = logging.getLogger("mmrl.identity")
SETTINGS_ENV = "MMRL_TRAINER_IDENTITY_FILE"
KINDS = {
    "ServiceAccount": Kind("", "v1", "serviceaccounts"),
    "Role": Kind("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Kind("rbac.authorization.k8s.io", "v1", "rolebindings"),
}


@dataclass(frozen=True)
class IdentitySettings:
    """The chart's `trainerIdentity` values: annotations for every namespace's `mmrl-trainer` ServiceAccount, and per
    namespace annotations that replace them."""

    annotations: dict[str, str] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)

    def annotations_for(self, namespace: str) -> dict[str, str]:
        return dict(self.namespaces.get(namespace, self.annotations))

    @classmethod
    def parse(cls, raw: Any, source: str = "trainerIdentity") -> IdentitySettings:
        """From the values' shape (`{annotations: {...}, namespaces: {ns: {annotations: {...}}}}`); a wrong shape
        raises ValueError naming the value."""
        raw = raw or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{source}: must be a map with annotations and namespaces, not {type(raw).__name__}")
        unknown = sorted(set(raw) - {"annotations", "namespaces"})
        if unknown:
            raise ValueError(f"{source}: unknown key(s) {', '.join(unknown)}; only annotations and namespaces")
        namespaces = raw.get("namespaces") or {}
        if not isinstance(namespaces, dict):
            raise ValueError(f"{source}.namespaces: must be a map of namespace to {{annotations: {{...}}}}")
        per_namespace = {}
        for ns, entry in namespaces.items():
            entry = entry or {}
            if not isinstance(entry, dict) or set(entry) - {"annotations"}:
                raise ValueError(f"{source}.namespaces.{ns}: must be {{annotations: {{...}}}}")
            per_namespace[str(ns)] = _string_map(entry.get("annotations"), f"{source}.namespaces.{ns}.annotations")
        return cls(_string_map(raw.get("annotations"), f"{source}.annotations"), per_namespace)

    @classmethod
    def load(cls, path: str | None) -> IdentitySettings:
        """From the file at `path` (JSON or YAML); no path: no annotations anywhere."""
        if not path:
            return cls()
        text = Path(path).read_text()
        try:
            raw = json.loads(text)
        except ValueError:
            raw = yaml.safe_load(text)
        return cls.parse(raw, f"{path}: trainerIdentity")


def _string_map(value: Any, where: str) -> dict[str, str]:
    value = value or {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{where}: must be a map of strings (annotation key: value)")
    return {str(k): v for k, v in value.items()}


def slim(obj: Obj) -> Obj:
    """What `differs` reads: name, namespace, labels, annotations, the version, and the body (rules, roleRef,
    subjects)."""
    meta, kind = obj.get("metadata") or {}, obj["kind"]
    keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "resourceVersion") if k in meta}
    return {"kind": kind, "metadata": keep, **{f: obj[f] for f in BODY_FIELDS[kind] if f in obj}}


class TrainerIdentities:
    """Watches of every namespace's `mmrl-trainer` ServiceAccount, Role and RoleBinding, and what each namespace's
    should be. `wake_namespace(ns)` is called when one of them changes so that it is no longer as built."""

    def __init__(
        self,
        kube: Kube,
        namespaces: list[str],
        settings: IdentitySettings,
        wake_namespace: Callable[[str], None] | None = None,
    ) -> None:
        self.settings, self.wake_namespace = settings, wake_namespace
        self.watches = {
            kind: Informer(
                kube.api_client,
                k,
                namespaces,
                field_selector=f"metadata.name={TRAINER_IDENTITY}",
                keep=lambda o, kind=kind: slim({**o, "kind": kind}),
                on_change=self._changed,
            )
            for kind, k in KINDS.items()
        }

    def informers(self) -> list[Informer]:
        return list(self.watches.values())

    def desired(self, namespace: str) -> list[dict[str, Any]]:
        return build_trainer_identity(namespace, self.settings.annotations_for(namespace))

    def due(self, namespace: str) -> list[dict[str, Any]]:
        """The identity objects of the namespace to apply now (none when all are as built), in apply order."""
        held = {kind: watch.get(namespace, TRAINER_IDENTITY) for kind, watch in self.watches.items()}
        return [o for o in self.desired(namespace) if differs(o, held[o["kind"]])]

    def wrote(self, obj: dict[str, Any]) -> None:
        """The apiserver's answer to our apply: the next pass sees it before the watch delivers it."""
        if (watch := self.watches.get(obj.get("kind", ""))) is not None:
            watch.wrote(obj)

    def stop(self) -> None:
        for watch in self.watches.values():
            watch.stop()

    def _changed(self, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None or self.wake_namespace is None:
            return
        namespace = obj["metadata"].get("namespace") or ""
        desired = next(o for o in self.desired(namespace) if o["kind"] == obj["kind"])
        if differs(desired, new):
            log.info("%s %s/%s is not as built: putting it back", obj["kind"], namespace, TRAINER_IDENTITY)
            self.wake_namespace(namespace)
