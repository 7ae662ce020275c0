"""`mmrl_api.label_selector` against the real kube-apiserver: for each selector, the objects `LabelSelector.matches`
takes are exactly those the apiserver lists for the selector as `str()` spells it (kubectl's `-l`). A ModelServer's
alias takes jobs by such a selector, so it must mean what it means everywhere else in Kubernetes."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from mmrl_api.label_selector import LabelSelector

pytestmark = pytest.mark.cluster

OBJECTS: dict[str, dict[str, str]] = {
    "none": {},
    "geo": {"team": "geo"},
    "geo-prod": {"team": "geo", "stage": "prod"},
    "vision": {"team": "vision", "stage": "prod"},
    "prefixed": {"example.com/team": "geo", "stage": ""},
}

SELECTORS: list[dict[str, Any]] = [
    {},
    {"matchLabels": {"team": "geo"}},
    {"matchLabels": {"team": "geo", "stage": "prod"}},
    {"matchExpressions": [{"key": "team", "operator": "In", "values": ["geo", "vision"]}]},
    {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["geo"]}]},
    {"matchExpressions": [{"key": "stage", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "stage", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "example.com/team", "operator": "In", "values": ["geo"]}]},
    {"matchExpressions": [{"key": "stage", "operator": "In", "values": [""]}]},
    {
        "matchLabels": {"stage": "prod"},
        "matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["vision"]}],
    },
]


def test_a_selector_takes_what_the_apiserver_lists(core: client.CoreV1Api, namespace: str) -> None:
    for name, labels in OBJECTS.items():
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "labels": labels}})
    differ = []
    for selector in SELECTORS:
        parsed = LabelSelector.model_validate(selector)
        spelled = "" if str(parsed) == "{}" else str(parsed)
        listed = core.list_namespaced_config_map(namespace, label_selector=spelled).items
        apiserver = {m.metadata.name for m in listed if m.metadata.name in OBJECTS}
        ours = {name for name, labels in OBJECTS.items() if parsed.matches(labels)}
        if ours != apiserver:
            differ.append((spelled, sorted(ours), sorted(apiserver)))
    assert not differ, differ
