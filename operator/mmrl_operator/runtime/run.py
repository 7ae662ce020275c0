"""Start the operator: configuration from flags and environment, metrics server, leader election, kopf."""

from __future__ import annotations

import argparse
import logging
import os
import time

import kopf
from prometheus_client import start_http_server

from mmrl_operator.runtime import handlers, metrics
from mmrl_operator.runtime.kube import Kube
from mmrl_operator.runtime.leader import LeaderElector
from mmrl_operator.runtime.workqueue import WorkQueue

log = logging.getLogger("mmrl.run")


def wait_until_served(kube: Kube, resources: list[tuple[str, str, str]], interval: float = 2.0) -> None:
    """Block until the apiserver serves every custom resource the handlers watch: kopf looks for them only once,
    at start. Until then the liveness endpoint is down, so a cluster without the CRDs (or KubeRay) restarts the
    pod with this message in its log rather than running an operator that watches nothing."""
    waited = 0.0
    while missing := [r for r in resources if not kube.serves(*r)]:
        if waited % 30 < interval:
            names = ", ".join(f"{plural}.{group}/{version}" for group, version, plural in missing)
            log.warning("waiting for the apiserver to serve %s (are the mmrl CRD and KubeRay installed?)", names)
        time.sleep(interval)
        waited += interval


def run_operator(args: argparse.Namespace) -> int:
    kopf.configure(verbose=False)  # kopf's own log format for every logger
    logging.getLogger().setLevel(os.environ.get("MMRL_LOG_LEVEL", "INFO"))
    # kopf logs every successful event handler at INFO; ours are one-line enqueues, so only problems matter.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    kube = Kube()
    wait_until_served(kube, [handlers.JOB_RESOURCE, *handlers.CHILD_RESOURCES])
    elector = None
    if not args.standalone:
        lease_ns = os.environ.get("POD_NAMESPACE", "default")
        elector = LeaderElector(kube.api_client, lease_ns, name=os.environ.get("MMRL_LEASE_NAME", args.peering))
    queue = WorkQueue(
        handlers.reconcile_key,
        workers=int(os.environ.get("MMRL_WORKERS", "4")),
        active=(elector.is_leader if elector else lambda: True),
    )
    if elector is not None:
        elector.on_leading = queue.resume  # the keys a standby kept run the moment it leads
    metrics.LEADER.set_function(lambda: 1.0 if elector is None or elector.is_leader() else 0.0)
    namespaces = args.namespace or []
    handlers.install(
        handlers.Runtime(
            kube=kube,
            queue=queue,
            elector=elector,
            resync_seconds=float(os.environ.get("MMRL_RESYNC_SECONDS", "30")),
            namespaces=namespaces,
            probe_workers=int(os.environ.get("MMRL_PROBE_WORKERS", "4")),
        )
    )
    if args.metrics_port:
        start_http_server(args.metrics_port)
    kopf.run(
        standalone=True,  # peering is our Lease election (see docs/adr/0001-operator-design.md)
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness or None,
    )
    return 0
