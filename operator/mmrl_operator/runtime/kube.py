"""Kubernetes API access: server-side apply under one field manager, idempotent deletes, events, status.

Everything the controller does to the cluster goes through `Kube`, so its requests are counted (per pass, and in the
`mmrl_api_requests_total` and `mmrl_api_writes_total` metrics) and test tooling can stop the process between any two
writes (mmrl_local.addons.crashing). Each call first checks that `rbac.PERMISSIONS` (the source of the chart's RBAC)
declares it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError

from mmrl_api import constants as c
from mmrl_operator.runtime import bounded_http, metrics
from mmrl_operator.runtime.permissions import CORE, require
from mmrl_operator.runtime.service_proxy import api_request, proxy_json

if TYPE_CHECKING:
    from mmrl_operator.runtime.prober import Prober

log = logging.getLogger("mmrl.kube")


class StatusConflict(Exception):
    """The job changed between our read and our status write; the pass must be decided again from a fresh read."""


class JobGone(Exception):
    """The job was deleted between our read and our status write: nothing is left to reconcile."""


class ApplyRejected(Exception):
    """The apiserver refused an apply for good (4xx: schema, an admission webhook or policy, quota, RBAC); retrying
    the same object will not help until someone changes the spec or the cluster."""

    def __init__(self, kind: str, name: str, status: int, message: str) -> None:
        super().__init__(f"{kind} {name} was refused ({status}): {message}")
        self.kind, self.name, self.status, self.message = kind, name, status, message


def _api_message(body: object) -> str:
    try:
        return str(json.loads(body).get("message") or body)  # type: ignore[arg-type]
    except (TypeError, ValueError, AttributeError):
        return str(body)


def load_config() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


class Kube:
    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = api_client or load_config()
        self.dyn = DynamicClient(self.api_client)
        # No CoreV1Api: importing it builds every core/v1 model class, 0.4 s of each operator start (issue #32);
        # nodes and events go through the dynamic client like every other kind.
        self.custom = client.CustomObjectsApi(self.api_client)
        self._thread = threading.local()  # requests of the current thread: the reconcile passes run on 4 workers
        # The operator's /v1/models prober (set by dispatch.Runtime); without one a pass asks the server itself.
        self.prober: Prober | None = None

    def _resource(self, api_version: str, kind: str, *verbs: str):  # type: ignore[no-untyped-def]
        resource = self.dyn.resources.get(api_version=api_version, kind=kind)
        require(resource.group, resource.name, *verbs)
        return resource

    def _count(self) -> None:
        self._thread.calls = self.thread_calls() + 1
        metrics.API_REQUESTS.inc()

    def thread_calls(self) -> int:
        """Requests made so far by the calling thread (a pass's own calls: the difference around it)."""
        return getattr(self._thread, "calls", 0)

    def _wrote(self) -> None:
        """After each write that the apiserver accepted (test tooling stops the process here:
        mmrl_local.addons.crashing)."""
        metrics.API_WRITES.inc()

    # --- reads ---------------------------------------------------------------------------------------------
    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_ours(c.PLURAL, namespace, name)

    def get_server(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ModelServer, or None when there is none."""
        return self._get_ours(c.SERVER_PLURAL, namespace, name)

    def _get_ours(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One of our custom objects (mmrl.dev) by name, or None when there is none."""
        self._count()
        require(c.GROUP, plural, "get")
        try:
            return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_owned(self, api_version: str, kind: str, namespace: str, job: str) -> list[dict[str, Any]]:
        self._count()
        result = self._resource(api_version, kind, "list").get(
            namespace=namespace, label_selector=f"{c.LABEL_JOB}={job}"
        )
        return [item.to_dict() for item in result.items]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One namespaced object by name, or None when there is none."""
        self._count()
        try:
            return self._resource(api_version, kind, "get").get(name=name, namespace=namespace).to_dict()  # type: ignore[no-any-return]
        except NotFoundError:
            return None

    def kueue_workloads(self, namespace: str) -> list[dict[str, Any]]:
        """Kueue's Workloads in the namespace; none where the apiserver does not serve them (no Kueue)."""
        require(c.KUEUE_GROUP, "workloads", "list")
        self._count()
        try:
            found = self.custom.list_namespaced_custom_object(c.KUEUE_GROUP, c.KUEUE_VERSION, namespace, "workloads")
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return list(found.get("items") or [])

    def get_node(self, name: str) -> dict[str, Any] | None:
        self._count()
        try:
            return self._resource("v1", "Node", "get").get(name=name).to_dict()  # type: ignore[no-any-return]
        except NotFoundError:
            return None

    def service_get_json(self, namespace: str, service: str, port: int, path: str, deadline: float = 5.0) -> Any:
        """GET `path` from a Service through the apiserver's service proxy (works from inside and outside the
        cluster, needs `get services/proxy`); the JSON body, or an exception when it does not answer in full
        within `deadline` seconds or its answer is larger than 1 MiB."""
        require(CORE, "services/proxy", "get")
        self._count()
        return proxy_json(self.api_client, "GET", namespace, service, port, path, deadline=deadline)

    def pod_call(
        self,
        namespace: str,
        pod: str,
        port: int,
        method: str,
        path: str,
        body: Any = None,
        deadline: float = 5.0,
        headers: dict[str, str] | None = None,
    ) -> bytes:
        """`method` `path` on one pod through the apiserver's pod proxy (a shared server's replica, one at a time:
        the Service would pick one for us); the raw body of a 2xx answer, under a deadline and the 1 MiB cap."""
        require(CORE, "pods/proxy", "get" if method == "GET" else "create")
        self._count()
        resource = f"/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/{path.lstrip('/')}"
        return bounded_http.request(self.api_client, method, resource, body=body, deadline=deadline, headers=headers)

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Secret by name, or None. Only a ModelServer's admin-key Secret is ever read (`servers.admin_key`)."""
        return self.get("v1", "Secret", namespace, name)

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create `obj` (a plain POST, not an apply); None when an object of that name exists already."""
        self._count()
        meta = obj["metadata"]
        try:
            stored = self._resource(obj["apiVersion"], obj["kind"], "create").create(
                body=obj, namespace=meta.get("namespace"), field_manager=c.FIELD_MANAGER
            )
        except DynamicApiError as exc:
            if exc.status == 409:
                return None
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                raise ApplyRejected(obj["kind"], meta["name"], exc.status, _api_message(exc.body)) from exc
            raise
        self._wrote()
        return stored.to_dict()  # type: ignore[no-any-return]

    def patch_pod_condition(self, namespace: str, pod: str, condition: dict[str, Any]) -> None:
        """Set one condition of a pod's status (a readiness gate's), leaving the kubelet's own: a strategic merge
        patch, which merges conditions by type."""
        require(CORE, "pods/status", "patch")
        self._count()
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/status"
        body = {"status": {"conditions": [condition]}}
        api_request(self.api_client, "PATCH", path, body=body, content_type="application/strategic-merge-patch+json")
        self._wrote()

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the apiserver serves the resource now (discovery: every authenticated client may read it)."""
        self._count()
        try:
            found = self.custom.get_api_resources(group, version)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.name == plural for r in found.resources)

    # --- writes --------------------------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply; returns the object as the apiserver stored it."""
        self._count()
        meta = obj["metadata"]
        try:
            stored = self._resource(obj["apiVersion"], obj["kind"], "create", "patch").server_side_apply(
                body=obj,
                name=meta["name"],
                namespace=meta.get("namespace"),
                field_manager=c.FIELD_MANAGER,
                force_conflicts=True,
            )
        except DynamicApiError as exc:
            # 409 cannot happen with force; 429 is throttling: both are worth retrying, the rest is not.
            if exc.status is not None and 400 <= exc.status < 500 and exc.status not in (409, 429):
                raise ApplyRejected(obj["kind"], meta["name"], exc.status, _api_message(exc.body)) from exc
            raise
        self._wrote()
        return stored.to_dict()  # type: ignore[no-any-return]

    def delete(self, api_version: str, kind: str, namespace: str, name: str, grace: int | None = None) -> bool:
        self._count()
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        try:
            self._resource(api_version, kind, "delete").delete(name=name, namespace=namespace, body=body)
        except NotFoundError:
            return False
        self._wrote()
        return True

    def patch_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        resource_version: str | None = None,
        plural: str = c.PLURAL,
    ) -> dict[str, Any]:
        """Merge-patch the status of a job (or, with `plural`, another mmrl.dev kind) under our field manager. With
        `resource_version` the apiserver applies it only to the object the decision was made from (409 Conflict
        otherwise, raised as StatusConflict)."""
        self._count()
        require(c.GROUP, f"{plural}/status", "patch")
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            stored = self.custom.patch_namespaced_custom_object_status(
                c.GROUP,
                c.VERSION,
                namespace,
                plural,
                name,
                body,
                field_manager=c.FIELD_MANAGER,
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status == 409:
                raise StatusConflict(f"{namespace}/{name} changed since it was read") from exc
            if exc.status == 404:
                raise JobGone(f"{namespace}/{name} was deleted since it was read") from exc
            raise
        self._wrote()
        return stored  # type: ignore[no-any-return]  # the job as stored after the patch

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post a core/v1 Event on a job or server (best effort: an event must never fail a reconcile)."""
        self._count()
        meta = obj["metadata"]
        now = datetime.now(UTC)
        digest = hashlib.sha1(f"{reason}{message}{now.isoformat()}".encode()).hexdigest()[:10]
        body = {
            "metadata": {"name": f"{meta['name']}.{digest}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": c.API_VERSION,
                "kind": obj.get("kind") or c.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": c.MANAGED_BY},
            "reportingComponent": c.MANAGED_BY,
            "reportingInstance": os.environ.get("POD_NAME", "local"),
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        try:
            self._resource("v1", "Event", "create").create(body=body, namespace=meta["namespace"])
        except ApiException as exc:  # DynamicApiError included
            log.warning("could not post event %s on %s: %s", reason, meta["name"], exc.reason)
