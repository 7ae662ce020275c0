"""Read jobs back from the control plane in tests; the operator subprocess itself is mmrl_local's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.addons.operator_process import OperatorProcess
from tests.support import polling

__all__ = ["Jobs", "OperatorProcess", "phases_until_done", "wait_until"]


def wait_until(
    pred: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2, what: str | Callable[[], str] = ""
) -> Any:
    """Poll through transient API refusals (an object just created or being deleted) as well."""
    return polling.wait_until(pred, timeout, interval, what, retry_on=(client.exceptions.ApiException,))


class Jobs:
    """Thin helpers over the CustomObjects API for MultimodalRLJobs and their KubeRay children."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.ns = namespace

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        body = {**body, "metadata": {**body["metadata"], "namespace": self.ns}}
        return self.custom.create_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, body)

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, name)

    def patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, name, patch)

    def patch_status(self, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object_status(
            c.GROUP, c.VERSION, self.ns, c.PLURAL, name, {"status": status}
        )

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def poke_child(self, plural: str, name: str, value: str) -> None:
        """Change an annotation on a KubeRay child: an event on it, which wakes its job's reconcile, and nothing
        that the operator or KubeRay acts on."""
        body = {"metadata": {"annotations": {"test.mmrl.dev/poke": value}}}
        self.custom.patch_namespaced_custom_object(c.RAY_GROUP, c.RAY_VERSION, self.ns, plural, name, body)

    def ray(self, plural: str) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(c.RAY_GROUP, c.RAY_VERSION, self.ns, plural)["items"]

    def ray_names(self, plural: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.ray(plural))

    def events(self, name: str) -> list[str]:
        """Reasons in the order the events were created. Event timestamps have one-second resolution, so several
        events of one pass tie; on this test apiserver resourceVersion is etcd's revision, which orders them."""
        items = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        return [e.reason for e in sorted(items, key=lambda e: int(e.metadata.resource_version))]

    def event_messages(self, name: str, reason: str) -> list[str]:
        """Messages of the job's events with this reason, in the order they were created (as `events`)."""
        items = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        ordered = sorted(items, key=lambda e: int(e.metadata.resource_version))
        return [e.message for e in ordered if e.reason == reason]

    def condition(self, name: str, ctype: str) -> str | None:
        for cond in self.status(name).get("conditions") or []:
            if cond["type"] == ctype:
                return cond["status"]
        return None


def phases_until_done(jobs: Jobs, name: str, timeout: float = 90) -> list[str]:
    seen: list[str] = []

    def done() -> bool:
        phase = jobs.status(name).get("phase")
        if phase and (not seen or seen[-1] != phase):
            seen.append(phase)
        return phase in ("Succeeded", "Failed")

    def state() -> str:
        status = jobs.status(name)
        conditions = {c["type"]: f"{c['status']}/{c.get('reason', '')}" for c in status.get("conditions") or []}
        return f"{name} to finish; phases seen {seen}, conditions {conditions}, message {status.get('message')!r}"

    wait_until(done, timeout, interval=0.05, what=state)
    return seen
