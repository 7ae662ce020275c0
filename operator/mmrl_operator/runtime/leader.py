"""Leader election on a coordination.k8s.io Lease, so only one operator replica acts at a time.

Standbys keep watching (their caches stay warm); their work queue keeps every key that comes due until they hold the
lease, then runs them all (`on_leading`). A leader that cannot renew within the lease duration stops acting before
another replica may take over (renew deadline < lease duration), which is what prevents two replicas acting at once.
A replica that stops cleanly (a rolling update's SIGTERM) releases the lease after its last pass, so a standby, which
asks every `retry_seconds`, takes over at once instead of after the lease runs out.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mmrl_operator.runtime.permissions import COORDINATION, require

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
        retry_seconds: float = 1.0,
        on_leading: Callable[[], None] | None = None,
    ) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.identity = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        self.lease_seconds, self.renew_seconds, self.retry_seconds = lease_seconds, renew_seconds, retry_seconds
        self.on_leading = on_leading
        self._leader_until = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mmrl-leader", daemon=True)

    def is_leader(self) -> bool:
        return time.monotonic() < self._leader_until

    def start(self) -> None:
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop electing; with `release`, hand the lease back if this replica holds it. Call it after the last pass
        has ended: from here on this replica acts on nothing."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.lease_seconds)  # a round in flight would renew after the release
        held, self._leader_until = self.is_leader(), 0.0
        if release and held:
            try:
                self._release()
            except Exception:
                log.exception("could not release the lease; a standby takes over when it expires")

    def _loop(self) -> None:
        while not self._stop.is_set():
            leading = False
            try:
                if self._try_acquire_or_renew():
                    was = self.is_leader()
                    # Act only until a margin before the lease could be taken over by someone else.
                    self._leader_until = time.monotonic() + self.lease_seconds - self.renew_seconds
                    leading = True
                    if not was and self.on_leading is not None:
                        self.on_leading()
            except Exception:
                log.exception("leader election round failed")
            self._stop.wait(self.renew_seconds if leading else self.retry_seconds)

    def _release(self) -> None:
        require(COORDINATION, "leases", "get")
        lease = self.api.read_namespaced_lease(self.name, self.namespace)
        if lease.spec.holder_identity != self.identity:
            return
        now = _fmt(_now())
        spec = {"leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now}
        spec["leaseTransitions"] = lease.spec.lease_transitions or 0
        body = {"metadata": {"name": self.name, "resourceVersion": lease.metadata.resource_version}, "spec": spec}
        require(COORDINATION, "leases", "update")
        self.api.replace_namespaced_lease(self.name, self.namespace, body)  # no holder: free for the next
        log.info("released the lease", extra={"identity": self.identity})

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
