"""What a job's `specPatch` may not do to its Ray pods, written once: each rule is a Python check (`mmrl validate`) and
a CEL expression (the chart's ValidatingAdmissionPolicy, operator/mmrl_operator/codegen/spec_patch_policy.py), so the
two refuse the same patches with the same message (tests/cluster/test_spec_patch_policy.py holds them together on the
live apiserver).

`specPatch` is a JSON merge patch onto every Ray pod spec, so whoever may create a MultimodalRLJob could otherwise
have the operator create pods that run as another ServiceAccount, join the node's network, PID or IPC namespace,
mount a host path, run privileged or with added capabilities, or tolerate HyperPod's node-health-status taint.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from mmrl_api import constants as c
from mmrl_api.job import JobSpec

SPEC_PATCH_FIELD = "spec_patch"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
# The pods' identity is the namespace's trainer identity, with its API token mounted (the trainer reports progress
# with it); the RayCluster builder sets these fields after the specPatch anyway, so a patch of them is a mistake.
SERVICE_ACCOUNT_FIELDS = ("serviceAccountName", "serviceAccount", "automountServiceAccountToken")


@dataclass(frozen=True)
class Rule:
    field: str  # below the specPatch, e.g. "volumes[].hostPath"
    why: str
    allows: Callable[[dict[str, Any]], bool]  # the patch (a dict) passes
    cel: Callable[[str], str]  # the CEL expression that holds for an allowed patch, given the patch's CEL expression


def _items(patch: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = patch.get(key)
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def _security(container: dict[str, Any]) -> dict[str, Any]:
    value = container.get("securityContext")
    return value if isinstance(value, dict) else {}


def _tolerates_health_taint(t: dict[str, Any]) -> bool:
    key = t.get("key") or ""
    return key == c.HYPERPOD_TAINT_KEY or (key == "" and (t.get("operator") or "Equal") == "Exists")


def _rules() -> list[Rule]:
    identity = "the Ray pods run as the namespace's mmrl-trainer ServiceAccount with its token; a specPatch may not "
    identity += "change that"
    out = [
        Rule(f, identity, lambda p, f=f: f not in p, lambda x, f=f: f"!has({x}.{f})") for f in SERVICE_ACCOUNT_FIELDS
    ]
    out += [
        Rule(
            f,
            "a specPatch may not put the Ray pods in the node's namespaces",
            lambda p, f=f: p.get(f) is not True,
            lambda x, f=f: f"{x}.?{f}.orValue(false) != true",
        )
        for f in HOST_NAMESPACES
    ]
    out.append(
        Rule(
            "volumes[].hostPath",
            "a specPatch may not mount a path of the node",
            lambda p: all("hostPath" not in v for v in _items(p, "volumes")),
            lambda x: f"{x}.?volumes.orValue([]).all(v, !has(v.hostPath))",
        )
    )
    key = "t.?key.orValue('')"
    out.append(
        Rule(
            "tolerations[]",
            "a specPatch may not tolerate HyperPod's node-health-status taint, by its key or as every taint",
            lambda p: not any(_tolerates_health_taint(t) for t in _items(p, "tolerations")),
            lambda x: (
                f"{x}.?tolerations.orValue([]).all(t, {key} != '{c.HYPERPOD_TAINT_KEY}' "
                f"&& ({key} != '' || t.?operator.orValue('Equal') != 'Exists'))"
            ),
        )
    )
    for kind in CONTAINER_LISTS:
        out.append(
            Rule(
                f"{kind}[].securityContext.privileged",
                "a specPatch may not run a privileged container",
                lambda p, k=kind: all(_security(x).get("privileged") is not True for x in _items(p, k)),
                lambda x, k=kind: f"{x}.?{k}.orValue([]).all(x, x.?securityContext.?privileged.orValue(false) != true)",
            )
        )
        out.append(
            Rule(
                f"{kind}[].securityContext.capabilities.add",
                "a specPatch may not add Linux capabilities",
                lambda p, k=kind: all(not _added_capabilities(x) for x in _items(p, k)),
                lambda x, k=kind: (
                    f"{x}.?{k}.orValue([]).all(x, size(x.?securityContext.?capabilities.?add.orValue([])) == 0)"
                ),
            )
        )
    return out


def _added_capabilities(container: dict[str, Any]) -> list[Any]:
    caps = _security(container).get("capabilities")
    added = caps.get("add") if isinstance(caps, dict) else None
    return added if isinstance(added, list) else []


RULES = _rules()


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list or any(_is_list(a) for a in typing.get_args(annotation))


def spec_patch_paths(model: type[BaseModel] = JobSpec, under: tuple[str, ...] = ("spec",)) -> list[tuple[str, ...]]:
    """The wire path of every specPatch field of the job, e.g. ("spec", "cluster", "podTemplate", "specPatch")."""
    found = []
    for name, field in model.model_fields.items():
        path = (*under, field.alias or name)
        if name == SPEC_PATCH_FIELD:
            found.append(path)
            continue
        for nested in _models(field.annotation):
            inner = spec_patch_paths(nested, path)
            if inner and _is_list(field.annotation):
                # One CEL variable per path cannot reach into list items; write the rule when such a field appears.
                raise NotImplementedError(f"{'.'.join(path)}: a specPatch inside a list is not covered")
            found += inner
    return found


def message(path: tuple[str, ...], rule: Rule) -> str:
    """The refusal's message, naming the field: the same words from the CLI and from the apiserver."""
    return f"{'.'.join(path)}.{rule.field}: {rule.why}"


def violations(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(field path, message) of each rule a job manifest's specPatches break: what the chart's policy refuses."""
    out = []
    for path in spec_patch_paths():
        patch: Any = manifest
        for step in path:
            patch = patch.get(step) if isinstance(patch, dict) else None
        if not isinstance(patch, dict):
            continue
        for rule in RULES:
            if not rule.allows(patch):
                out.append((f"{'.'.join(path)}.{rule.field}", message(path, rule)))
    return out
