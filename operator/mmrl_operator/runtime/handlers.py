"""kopf wiring, and nothing else: each handler hands over to `dispatch`.

Only `on.event` handlers are used: they add no finalizers and write no annotations on anyone's objects (kopf's
timers and daemons would add a finalizer to every job, which an operator that is down turns into a blocked
delete). kopf watches the jobs; everything else is the operator's own (see dispatch.py).
"""

from __future__ import annotations

from typing import Any

import kopf

from mmrl_operator.runtime import dispatch


@kopf.on.startup()
def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    assert dispatch.RUNTIME is not None, "run.py installs the runtime before kopf starts"
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.posting.enabled = False  # our own Events carry reasons; kopf's would duplicate them
    # kopf's "restricted mode": no watch on CRDs and no list of namespaces, which would take cluster-wide reads
    # (customresourcedefinitions; namespaces when it watches only some) that nothing else needs. It watches the
    # given namespaces, or the whole cluster, for the resources served at start (the warm start waits for ours).
    settings.scanning.disabled = True
    dispatch.RUNTIME.finish_start()  # every node and child listed before kopf's watch of the jobs begins


@kopf.on.cleanup()
def _cleanup(**_: Any) -> None:
    if dispatch.RUNTIME:
        dispatch.RUNTIME.shut_down()


@kopf.on.probe(id="leader")
def _probe(**_: Any) -> bool:
    return bool(dispatch.RUNTIME and dispatch.RUNTIME.is_leader())


@kopf.on.event(*dispatch.JOB_RESOURCE)
def _job_event(type: str | None, name: str, namespace: str, body: kopf.Body, **_: Any) -> None:
    dispatch.job_event(type, namespace, name, body)
