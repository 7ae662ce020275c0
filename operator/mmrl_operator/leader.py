"""Leader election on a coordination.k8s.io Lease, so only one operator replica acts at a time.

Standbys keep watching (their caches stay warm) but their work queue drops every key until they hold the lease.
A leader that cannot renew within the lease duration stops acting before another replica may take over
(renew deadline < lease duration), which is what prevents two replicas acting at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mmrl_operator.rbac import COORDINATION, require

log = logging.getLogger("mmrl.leader")


def _now() -> datetime:
    return datetime.now(UTC)


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str = "mmrl-operator",
        identity: str | None = None,
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
    ) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.identity = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self._leader_until = 0.0
        self._stop = threading.Event()

    def is_leader(self) -> bool:
        return time.monotonic() < self._leader_until

    def start(self) -> None:
        threading.Thread(target=self._loop, name="mmrl-leader", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self._try_acquire_or_renew():
                    # Act only until a margin before the lease could be taken over by someone else.
                    self._leader_until = time.monotonic() + self.lease_seconds - self.renew_seconds
            except Exception:
                log.exception("leader election round failed")
            self._stop.wait(self.renew_seconds)

    def _try_acquire_or_renew(self) -> bool:
        now = _now()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": _fmt(now),
        }
        require(COORDINATION, "leases", "get")
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {"metadata": {"name": self.name}, "spec": {**spec, "acquireTime": _fmt(now), "leaseTransitions": 0}}
            require(COORDINATION, "leases", "create")
            try:
                self.api.create_namespaced_lease(self.namespace, body)
            except ApiException as exc2:
                if exc2.status == 409:
                    return False
                raise
            log.info("became leader", extra={"identity": self.identity})
            return True
        holder = lease.spec.holder_identity
        renew = lease.spec.renew_time
        expired = renew is None or renew + timedelta(seconds=lease.spec.lease_duration_seconds or 0) < now
        if holder not in (None, "", self.identity) and not expired:
            return False
        if holder != self.identity:
            spec["acquireTime"] = _fmt(now)
            spec["leaseTransitions"] = (lease.spec.lease_transitions or 0) + 1
            log.info("taking over leadership", extra={"identity": self.identity, "previous": holder})
        body = {"metadata": {"name": self.name, "resourceVersion": lease.metadata.resource_version}, "spec": spec}
        require(COORDINATION, "leases", "update")
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status == 409:  # somebody else wrote first: they win this round
                return False
            raise
        return True
