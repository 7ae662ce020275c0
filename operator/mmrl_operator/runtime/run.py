"""Start the operator: configuration from flags and environment, metrics server, leader election, kopf.

kopf (with aiohttp) is imported only once the warm start (dispatch.Runtime.warm_start) has listed every node and
child: a restarted operator's first passes run while kopf imports and starts, instead of after.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import threading

from prometheus_client import start_http_server

from mmrl_operator.runtime import metrics
from mmrl_operator.runtime.caches import Caches
from mmrl_operator.runtime.kube import Kube
from mmrl_operator.runtime.leader import LeaderElector
from mmrl_operator.runtime.workqueue import Key, WorkQueue

log = logging.getLogger("mmrl.run")
# kopf's own line format (kopf.configure sets it once kopf is imported), so the log reads the same throughout.
KOPF_LINE = "[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s"


def run_operator(args: argparse.Namespace) -> int:
    level = os.environ.get("MMRL_LOG_LEVEL", "INFO")
    root = logging.getLogger()
    early = logging.StreamHandler()
    early.setFormatter(logging.Formatter(KOPF_LINE))
    root.addHandler(early)
    root.setLevel(level)
    kube = Kube()
    elector = None
    if not args.standalone:
        lease_ns = os.environ.get("POD_NAMESPACE", "default")
        elector = LeaderElector(kube.api_client, lease_ns, name=os.environ.get("MMRL_LEASE_NAME", args.peering))
    queue = WorkQueue(
        reconcile_key,
        workers=int(os.environ.get("MMRL_WORKERS", "4")),
        active=(elector.is_leader if elector else lambda: True),
    )
    namespaces = args.namespace or []
    # The nodes' and children's LISTs start now, before the decision's modules (the API's pydantic models and the
    # rest) are imported: the imports run while the apiserver answers (issue #32: restart -> first pass). The keys
    # the LISTs wake wait in the queue, which starts once the warm start has listed the rest.
    caches = Caches(kube, namespaces, wake=queue.add)
    early_lists = threading.Thread(target=_list_quietly, args=(caches,), name="mmrl-early-lists", daemon=True)
    early_lists.start()

    from mmrl_operator.core.builders.network_policy import SETTINGS_ENV, NetworkPolicySettings
    from mmrl_operator.runtime import dispatch
    from mmrl_operator.runtime.identity import IdentitySettings

    try:
        identity_settings = IdentitySettings.load(getattr(args, "trainer_identity", None))
    except (OSError, ValueError) as err:
        log.error("the trainer identity settings cannot be read: %s", err)
        return 2

    network = NetworkPolicySettings.from_json(os.environ.get(SETTINGS_ENV))  # a bad chart value stops the start
    metrics.LEADER.set_function(lambda: 1.0 if elector is None or elector.is_leader() else 0.0)
    runtime = dispatch.Runtime(
        kube=kube,
        queue=queue,
        elector=elector,
        resync_seconds=float(os.environ.get("MMRL_RESYNC_SECONDS", "30")),
        namespaces=namespaces,
        probe_workers=int(os.environ.get("MMRL_PROBE_WORKERS", "4")),
        listing=caches,
        early_lists=early_lists,
        network=network,
        identity_settings=identity_settings,
    )
    gc.freeze()  # what the imports made stays: never scanned again (`mmrl operator` started with collection off)
    gc.enable()
    if elector is not None:  # the keys a standby kept run the moment it leads
        elector.on_leading = lambda: (queue.resume(), runtime.servers.queue.resume())
    dispatch.install(runtime)
    warm = runtime.start_warm()
    if args.metrics_port:
        start_http_server(args.metrics_port)

    warm.join()  # the first passes run from here on; kopf's import no longer holds up the LISTs

    import kopf

    from mmrl_operator.runtime import handlers  # noqa: F401  (registers the kopf handlers)

    kopf.configure(verbose=False)  # kopf's own log format for every logger
    root.removeHandler(early)
    root.setLevel(level)
    # kopf logs every successful event handler at INFO; ours are one-line enqueues, so only problems matter.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # kopf watches only what the apiserver serves when it starts.
    dispatch.wait_until_served(kube, [dispatch.JOB_RESOURCE], runtime.stop)
    kopf.run(
        standalone=True,  # peering is our Lease election (see docs/adr/0001-operator-design.md)
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness or None,
    )
    return 0


def reconcile_key(key: Key) -> float | None:
    from mmrl_operator.runtime import dispatch

    return dispatch.reconcile_key(key)


def _list_quietly(caches: Caches) -> None:
    """The early LISTs; one that fails (a resource not served yet, say) is listed again by the warm start, which
    waits for it and reports what fails."""
    try:
        caches.start()
    except Exception as err:
        log.info("early LISTs: %s; the warm start lists again", err)
