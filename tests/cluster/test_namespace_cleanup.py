"""A test's namespace goes away after the test even when the KubeRay that finalized its RayJobs is gone: a namespace
held Terminating by a finalizer makes the namespace controller retry it for the rest of the run (a LIST and a DELETE
of every resource type each time), which once left 23 such namespaces busying the apiserver with ~170 requests/s."""

from __future__ import annotations

import secrets

import pytest
from kubernetes import client

from mmrl_api import constants as c
from tests.support.cluster_fixtures import release_ray_finalizers
from tests.support.polling import wait_until

pytestmark = pytest.mark.cluster


def _gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
    except client.exceptions.ApiException as err:
        return err.status == 404
    return False


def test_a_namespace_whose_rayjob_kuberay_finalized_is_deleted_once_released(control_plane, core, custom) -> None:
    name = f"finalized-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": name}})
    rayjob = {
        "apiVersion": c.RAY_API_VERSION,
        "kind": "RayJob",
        "metadata": {"name": "held", "finalizers": ["ray.io/rayjob-finalizer"]},
        "spec": {"entrypoint": "true"},
    }
    custom.create_namespaced_custom_object(c.RAY_GROUP, c.RAY_VERSION, name, "rayjobs", rayjob)
    core.delete_namespace(name)
    # Held: the namespace controller deleted what it could and now waits on the finalizer, as it would forever.
    wait_until(
        lambda: "ray.io/rayjob-finalizer" in str(core.read_namespace(name).status.conditions),
        60,
        what="the namespace to report the RayJob finalizer holding it",
    )
    release_ray_finalizers(custom, name)
    wait_until(lambda: _gone(core, name), 60, what=f"namespace {name} to be deleted")
