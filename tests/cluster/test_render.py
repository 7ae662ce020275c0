"""`mmrl render` against the real apiserver: for each example job, the objects it prints are the ones the operator
creates for the same job, and every field it prints is stored as printed."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import dynamic

from mmrl_api import validate_manifest
from mmrl_local.cluster import storage
from mmrl_operator.cli.render import as_submitted, render_objects
from tests.support.corpus import example
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster


def children(api_client, namespace: str, uid: str, kinds: set[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """Every object of `kinds` in the namespace that the job controls, by (kind, name)."""
    api = dynamic.DynamicClient(api_client)
    out = {}
    for api_version, kind in kinds:
        for item in api.resources.get(api_version=api_version, kind=kind).get(namespace=namespace).items:
            obj = item.to_dict()
            owners = obj["metadata"].get("ownerReferences") or []
            if any(o["uid"] == uid and o.get("controller") for o in owners):
                out[(kind, obj["metadata"]["name"])] = obj
    return out


def differences(printed: Any, stored: Any, path: str = "") -> list[str]:
    """Where `stored` does not hold `printed`: the apiserver may add defaults, but may not drop or change a field."""
    if isinstance(printed, dict):
        if not isinstance(stored, dict):
            return [f"{path}: stored {stored!r}"]
        return [d for k, v in printed.items() for d in differences(v, stored.get(k), f"{path}.{k}")]
    if isinstance(printed, list):
        if not isinstance(stored, list) or len(stored) != len(printed):
            return [f"{path}: printed {len(printed)} items, stored {stored!r}"]
        return [
            d for i, (p, s) in enumerate(zip(printed, stored, strict=True)) for d in differences(p, s, f"{path}[{i}]")
        ]
    if printed is False and stored is None:
        return []  # Go's omitempty: a false bool (e.g. volumeMounts[].readOnly) is stored as absent
    return [] if printed == stored else [f"{path}: printed {printed!r}, stored {stored!r}"]


@pytest.mark.parametrize(("example_file", "claim"), [("job.yaml", "fsx-claim"), ("local.yaml", "mmrl-checkpoints")])
def test_render_prints_exactly_what_the_operator_creates(
    example_file, claim, jobs, operator, kuberay, hyperpod_nodes, core, api_client, tmp_path
):
    hyperpod_nodes.cpu()
    hyperpod_nodes.gpu(2)
    storage.create_hostpath_claim(core, jobs.ns, claim, tmp_path / claim)  # the example's checkpoint volume
    try:
        check_render_against_the_operator(example(example_file), jobs, kuberay, api_client)
    finally:
        storage.delete_hostpath_claim(core, jobs.ns, claim)


def check_render_against_the_operator(manifest: dict, jobs, kuberay, api_client) -> None:
    name = manifest["metadata"]["name"]
    kuberay.script(f"{name}-a1", "succeed-after=1")
    created = jobs.create(manifest)
    # Serving: every child the job will have exists (the inference pods may stay Pending; they need not run).
    wait_until(lambda: jobs.status(name).get("phase") == "Serving", 90, what="phase Serving")

    job, errors = validate_manifest(manifest)
    assert job is not None, errors
    uid = created["metadata"]["uid"]
    printed = {(o["kind"], o["metadata"]["name"]): o for o in render_objects(as_submitted(job, jobs.ns, uid))}
    kinds = {(o["apiVersion"], o["kind"]) for o in printed.values()}
    stored = wait_until(
        lambda: (found := children(api_client, jobs.ns, uid, kinds)).keys() >= printed.keys() and found,
        30,
        what="every rendered object on the apiserver",
    )
    assert sorted(stored) == sorted(printed)
    for key, obj in printed.items():
        assert differences(obj, stored[key]) == [], key
