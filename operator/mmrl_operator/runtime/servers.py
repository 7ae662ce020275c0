"""The ModelServer controller: informers for the servers and their children, a work queue, and one pass per server
(read from the caches, `core.model_server.decide_server`, write).

It runs beside the jobs' controller in the same process, under the same leader election, with a queue of its own:
a server's pass never waits behind a thousand jobs' resync, and a job's never behind a server's. Servers come from
an informer rather than kopf (there are few, and their passes read them from the cache like every child); their
Deployments, Services and pods from informers selected by the `mmrl.dev/server` label, so a change of any of them
wakes its server. A child missing from the cache is read by name before it is first written: an object under that
name that the server does not control is reported (NameConflict), never overwritten. The server's admin key is read
from its Secret by name on every pass (made with a random key when there is none: deleting it rotates the key), never
logged, and sent only to the server's own replicas' gateways.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mmrl_api import constants as c
from mmrl_api.gateway_contract import DEFAULT_OPERATOR_IMAGE, OPERATOR_IMAGE_ENV
from mmrl_api.model_server import ModelServer, ServedAdapter, parse_server
from mmrl_api.status import JobStatus
from mmrl_operator.core.builders import model_server as build
from mmrl_operator.core.builders.gateway import admin_key_of, build_admin_secret
from mmrl_operator.core.builders.model_server import ADAPTERS_LOADED
from mmrl_operator.core.model_server import (
    RESYNC_SECONDS,
    ServerObserved,
    ServerPlan,
    decide_server,
    status_changed,
)
from mmrl_operator.core.names import admin_secret_name, object_uid
from mmrl_operator.core.observed import pod_problem
from mmrl_operator.core.ownership import controlled_by, controller_of
from mmrl_operator.core.server_replicas import announced_names, fronted, gate_condition, vllm_up
from mmrl_operator.core.shared_serving import (
    Candidate,
    Refusal,
    alias_targets,
    candidate,
    desired_names,
    held_set,
    quarantine,
    settle_aliases,
)
from mmrl_operator.runtime.adapter_loader import sync_replica
from mmrl_operator.runtime.caches import (
    DEPLOYMENTS,
    PODS,
    SERVICES,
    WrittenGenerations,
    slim_deployment,
    slim_pod,
    slim_service,
)
from mmrl_operator.runtime.informer import Informer, Kind, Obj
from mmrl_operator.runtime.jobstore import JobStore
from mmrl_operator.runtime.kube import ApplyRejected, JobGone, Kube, StatusConflict
from mmrl_operator.runtime.reconcile import parse_read_back
from mmrl_operator.runtime.workqueue import Key, WorkQueue

log = logging.getLogger("mmrl.servers")
SERVERS = Kind(c.GROUP, c.VERSION, c.SERVER_PLURAL)
SERVER_RESOURCE = (c.GROUP, c.VERSION, c.SERVER_PLURAL)
LOADING_INTERVAL_SECONDS = 5.0  # while a replica does not hold every adapter yet


def slim_server(obj: Obj) -> Obj:
    """The whole server but its managedFields (a pass parses the spec and reads the status), with the apiVersion and
    kind a LIST leaves out of its items (the server's Events name its kind)."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "apiVersion": c.API_VERSION, "kind": c.SERVER_KIND, "metadata": meta}


def server_of(obj: Obj) -> Key | None:
    meta = obj["metadata"]
    server = (meta.get("labels") or {}).get(c.LABEL_SERVER)
    return (meta.get("namespace") or "", server) if server else None


CHILD_KINDS = {
    "Deployment": (DEPLOYMENTS, slim_deployment, "apps/v1"),
    "Service": (SERVICES, slim_service, "v1"),
    "Pod": (PODS, slim_pod, "v1"),
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ServerController:
    def __init__(
        self,
        kube: Kube,
        namespaces: list[str],
        active: Callable[[], bool] = lambda: True,
        workers: int = 2,
        jobs: JobStore | None = None,
        wake_job: Callable[[Key], None] = lambda key: None,
        resync_seconds: float = RESYNC_SECONDS,
    ) -> None:
        self.resync_seconds = resync_seconds
        # Not `jobs or JobStore()`: an empty store is falsy, and the runtime hands over its own before it fills.
        self.kube, self.jobs, self.wake_job = kube, jobs if jobs is not None else JobStore(), wake_job
        self.queue = WorkQueue(self.reconcile_key, workers=workers, active=active)
        self.servers = Informer(kube.api_client, SERVERS, namespaces, keep=slim_server, on_change=self._changed)
        self.children = {
            kind: Informer(
                kube.api_client,
                k,
                namespaces,
                label_selector=c.LABEL_SERVER,
                keep=keep,
                index=server_of,
                on_change=self._child_changed,
            )
            for kind, (k, keep, _) in CHILD_KINDS.items()
        }

        # A later generation than our write got back is someone else's edit of its spec, which the pass sets back.
        self._written = WrittenGenerations()
        # The image every replica's gateway runs: the operator's own (the chart passes it), which no job chooses.
        self.gateway_image = os.environ.get(OPERATOR_IMAGE_ENV) or DEFAULT_OPERATOR_IMAGE
        # ReplicaSet uid -> the uid of the Deployment that controls it ("" for none): a ReplicaSet's controller does
        # not change, so each is read once.
        self._replicaset_owner: dict[str, str] = {}

    def informers(self) -> list[Informer]:
        return [self.servers, *self.children.values()]

    def stop(self) -> None:
        self.queue.stop()
        for informer in self.informers():
            informer.stop()

    # --- watch callbacks ---------------------------------------------------------------------------------------
    def _changed(self, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None:
            return
        meta = obj["metadata"]
        before = (old or {}).get("metadata", {})
        # Our own status write comes back as an event: only a new generation or a deletion needs a pass.
        same = before.get("generation") == meta.get("generation") and bool(before.get("deletionTimestamp")) == bool(
            meta.get("deletionTimestamp")
        )
        if new is not None and old is not None and same:
            return
        self.queue.add((meta.get("namespace") or "", meta["name"]))

    def _child_changed(self, old: Obj | None, new: Obj | None) -> None:
        key = server_of(new or old or {"metadata": {}})
        if key is not None:
            self.queue.add(key)

    # --- one pass ----------------------------------------------------------------------------------------------
    def reconcile_key(self, key: Key) -> float | None:
        raw = self.servers.get(*key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return None  # gone or going: its children go with it (owner references)
        try:
            server = parse_server(raw)
        except ValueError as err:
            # Admission checks every field; this is a server stored before a stricter schema, or a schema bypassed.
            log.warning("server %s/%s does not validate and is left alone: %s", *key, err)
            return None
        calls0 = self.kube.thread_calls()
        observed = self.observe(server)
        admin_key = None
        if not observed.foreign:
            admin_key, foreign = self.admin_key(server, raw)
            if foreign:
                observed = dataclasses.replace(observed, foreign=(foreign,))
        now = _now()
        plan = decide_server(server, observed, now, self.gateway_image, self.resync_seconds)
        loading = self.adapters(server, plan, now, admin_key) if admin_key else False
        refused = []
        for obj in plan.apply:
            try:
                stored = self.kube.apply(obj)
            except ApplyRejected as err:
                refused.append(str(err))
                continue
            self._wrote(stored)
        if refused:
            message = "the apiserver refused " + "; ".join(refused)
            plan.status.update(phase="Degraded", message=message)
            log.warning("server %s/%s: %s", *key, message)
        for type_, reason, message in plan.events:
            self.kube.event(raw, type_, reason, message)
        patch = status_changed(raw.get("status") or {}, plan.status)
        if patch is not None:
            try:
                stored = self.kube.patch_status(
                    *key, patch, raw["metadata"].get("resourceVersion"), plural=c.SERVER_PLURAL
                )
            except StatusConflict:
                return 0.0  # decided on a stale read: the watch brings the newer one, decide again
            except JobGone:
                return None
            self.servers.wrote(stored)
            if {"adapters", "refused", "readyReplicas", "url"} & set(patch):
                for job in _jobs_in(raw.get("status") or {}) | _jobs_in(plan.status):
                    self.wake_job((server.namespace, job))  # each job's InferenceReady reads this status
        log.info(
            "reconciled server=%s/%s phase=%s adapters=%d applied=%d calls=%d",
            *key,
            plan.status.get("phase"),
            len(plan.status.get("adapters") or []),
            len(plan.apply),
            self.kube.thread_calls() - calls0,
        )
        if loading and plan.requeue_after is not None:
            return min(plan.requeue_after, LOADING_INTERVAL_SECONDS)
        return plan.requeue_after

    # --- adapters ------------------------------------------------------------------------------------------------
    def admin_key(self, server: ModelServer, raw: dict[str, Any]) -> tuple[str | None, str | None]:
        """(the server's admin key, None), made now when its Secret is missing; (None, "Secret <name> ...") when the
        Secret under that name is not the server's (never used: its key may be a stranger's)."""
        name, uid = admin_secret_name(server.name), object_uid(server)
        secret = self.kube.get_secret(server.namespace, name)
        if secret is None:
            fresh = build_admin_secret(
                server, secrets.token_urlsafe(32), build.owner_reference(server), build.server_labels(server)
            )
            secret = self.kube.create(fresh) or self.kube.get_secret(server.namespace, name)
            if secret is not None and controlled_by(secret, uid):
                message = f"Secret {name} holds the admin key of the server's gateways; delete it to rotate the key"
                self.kube.event(raw, "Normal", "AdminKeyCreated", message)
        if secret is None:
            return None, None  # deleted again at once: the next pass makes it
        if not controlled_by(secret, uid):
            ref = controller_of(secret)
            return None, f"Secret {name}" + (f" (controlled by {ref.get('kind')} {ref.get('name')})" if ref else "")
        return admin_key_of(secret) or None, None

    def adapters(self, server: ModelServer, plan: ServerPlan, now: str, key: str) -> bool:
        """Decide the held set and the aliases, make every replica that is up hold them (through its gateway, with
        the server's admin key), set each replica's readiness gate, and put it all in the planned status. True while
        some replica does not hold everything yet (the pass comes back sooner)."""
        status = server.status
        held_before = list(status.adapters) if status else []
        verdicts = self.verdicts(server, held_before)
        held, refused = held_set(server, held_before, verdicts, now, list(status.refused) if status else [])
        aliases = alias_targets(server, held, list(status.aliases) if status else [], now)
        models = {v.job: v.base_model for v in verdicts.values() if isinstance(v, Candidate)}
        want = desired_names(held, aliases, models)
        announced = announced_names(status, want)
        on: dict[str, list[str]] = {name: [] for name in want}
        served: dict[str, dict[str, str]] = {}  # replica -> {name: digest} it answers with
        errors: dict[str, str] = {}
        unfinished = False
        for pod in self.replicas(server):
            if not fronted(pod):  # from before the gateway: left alone until the roll-out replaces it
                unfinished = True
                continue
            name = pod["metadata"]["name"]
            holds: set[str] | None = None
            if vllm_up(pod):
                result = sync_replica(self.kube, server.namespace, name, key, want)
                if result.unreachable is None:
                    holds = result.holds
                    for held_name in holds:
                        on[held_name].append(name)
                    served[name] = result.serves
                    errors.update({n: f"{name}: {why}" for n, why in result.errors.items()})
            unfinished = unfinished or holds is None or holds != set(want)
            # Ready while it answers every announced name: one whose alias failed to move in place still answers
            # it from the files it held, and stays in the Service.
            answers = None if holds is None else set(served[name])
            self.set_gate(server, pod, gate_condition(answers, announced, now))
        entries, stuck = quarantine(
            [e.model_copy(update={"loaded_on": sorted(on[e.name]), "error": errors.get(e.name, "")}) for e in held]
        )
        refused += stuck
        plan.status["adapters"] = [e.wire() for e in entries]
        previous = list(status.aliases) if status else []
        plan.status["aliases"] = [a.wire() for a in settle_aliases(aliases, previous, served, errors)]
        plan.status["refused"] = [r.wire() for r in refused]
        plan.status["adapterCount"] = len(entries)
        return unfinished

    def set_gate(self, server: ModelServer, pod: dict[str, Any], wanted: dict[str, Any]) -> None:
        """Write the replica's readiness gate when its status differs from what it has (transition time kept)."""
        current = next(
            (cd for cd in (pod.get("status") or {}).get("conditions") or [] if cd.get("type") == ADAPTERS_LOADED),
            None,
        )
        if current is not None and current.get("status") == wanted["status"]:
            return
        try:
            self.kube.patch_pod_condition(server.namespace, pod["metadata"]["name"], wanted)
        except Exception as err:  # the pod went; the next pass sees what is left
            log.info("readiness gate of %s/%s not set: %s", server.namespace, pod["metadata"]["name"], err)

    def replicas(self, server: ModelServer) -> list[dict[str, Any]]:
        """The server's live pods, oldest first: those of a ReplicaSet of the server's own Deployment. Any pod of the
        namespace can carry the server's label; one that only looks like a replica is never sent the admin key,
        listed or given a readiness gate."""
        deployment = self.children["Deployment"].get(server.namespace, build.server_child_name(server.name))
        if deployment is None or not controlled_by(deployment, object_uid(server)):
            return []
        ours = deployment["metadata"].get("uid") or ""
        pods = [
            p
            for p in self.children["Pod"].indexed((server.namespace, server.name))
            if not p["metadata"].get("deletionTimestamp") and self._owning_deployment(p) == ours
        ]
        return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))

    def _owning_deployment(self, pod: dict[str, Any]) -> str:
        """The uid of the Deployment whose ReplicaSet controls `pod`, "" when none does."""
        ref = controller_of(pod)
        if ref is None or ref.get("kind") != "ReplicaSet" or not ref.get("uid"):
            return ""
        uid = str(ref["uid"])
        if uid not in self._replicaset_owner:
            rs = self.kube.get("apps/v1", "ReplicaSet", pod["metadata"].get("namespace") or "", str(ref.get("name")))
            if rs is None or (rs.get("metadata") or {}).get("uid") != uid:
                return ""  # gone, or another object under its name: not cached, the next pass reads again
            owner = controller_of(rs)
            self._replicaset_owner[uid] = str(owner["uid"]) if owner and owner.get("kind") == "Deployment" else ""
        return self._replicaset_owner[uid]

    def _wrote(self, stored: dict[str, Any]) -> None:
        self._written.wrote(stored)
        self.children[stored["kind"]].wrote(stored)

    def observe(self, server: ModelServer) -> ServerObserved:
        name, uid = build.server_child_name(server.name), object_uid(server)
        found: dict[str, dict[str, Any] | None] = {}
        foreign = []
        for kind in ("Deployment", "Service"):
            obj = self.children[kind].get(server.namespace, name)
            if obj is None or not controlled_by(obj, uid):
                # Not in the cache as ours: read it by name before it is written (a stranger's is never taken).
                obj = self.kube.get(CHILD_KINDS[kind][2], kind, server.namespace, name)
                if obj is not None and not controlled_by(obj, uid):
                    ref = controller_of(obj)
                    owner = f" (controlled by {ref.get('kind')} {ref.get('name')})" if ref else ""
                    foreign.append(f"{kind} {name}{owner}")
                    obj = None
                elif obj is not None:
                    obj = self.children[kind].wrote(obj)
            found[kind] = obj
        deployment = found["Deployment"]
        pods = self.replicas(server)
        return ServerObserved(
            deployment=deployment,
            service=found["Service"],
            deployment_edited=deployment is not None and self._written.edited("Deployment", deployment),
            pod_problem=next((pr for p in pods if (pr := pod_problem(p))), None),
            foreign=tuple(foreign),
        )

    def verdicts(self, server: ModelServer, held: list[ServedAdapter]) -> dict[str, Candidate | Refusal | None]:
        """`candidate` of every job that names the server, from the job store; a held job the store does not have
        (a restart, before kopf's watch delivered it) is read fresh, and only a 404 lets its adapter go."""
        out: dict[str, Candidate | Refusal | None] = {}
        for raw in self.jobs.in_namespace(server.namespace):
            if ((raw.get("spec") or {}).get("inference") or {}).get("server") != server.name:
                continue  # parsing every job of the namespace on every pass is what this check spares
            verdict = _verdict(raw, server)
            if verdict is not None:
                out[raw["metadata"]["name"]] = verdict
        for entry in held:
            if entry.job in out:
                continue
            raw = self.jobs.get(server.namespace, entry.job) or self.kube.get_job(server.namespace, entry.job)
            out[entry.job] = None if raw is None else _verdict(raw, server)
        return out


def _verdict(raw: dict[str, Any], server: ModelServer) -> Candidate | Refusal | None:
    if raw["metadata"].get("deletionTimestamp"):
        return None
    try:
        job, _ = parse_read_back(raw)  # a malformed status field is left out, as the job's own pass reads it
    except ValueError:
        return None  # an invalid spec: the job's own pass reports it
    return candidate(job, job.status or JobStatus(), server)


def _jobs_in(status: dict[str, Any]) -> set[str]:
    return {str(x.get("job")) for key in ("adapters", "refused") for x in status.get(key) or [] if x.get("job")}
