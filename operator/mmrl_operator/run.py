"""Start the operator: configuration from flags and environment, metrics server, leader election, kopf."""

from __future__ import annotations

import argparse
import logging
import os

import kopf
from prometheus_client import start_http_server

from mmrl_operator import handlers
from mmrl_operator.kube import Kube
from mmrl_operator.leader import LeaderElector
from mmrl_operator.workqueue import WorkQueue


def run_operator(args: argparse.Namespace) -> int:
    kopf.configure(verbose=False)  # kopf's own log format for every logger
    logging.getLogger().setLevel(os.environ.get("MMRL_LOG_LEVEL", "INFO"))
    # kopf logs every successful event handler at INFO; ours are one-line enqueues, so only problems matter.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    kube = Kube()
    elector = None
    if not args.standalone:
        lease_ns = os.environ.get("POD_NAMESPACE", "default")
        elector = LeaderElector(kube.api_client, lease_ns, name=os.environ.get("MMRL_LEASE_NAME", args.peering))
    queue = WorkQueue(
        handlers.reconcile_key,
        workers=int(os.environ.get("MMRL_WORKERS", "4")),
        active=(elector.is_leader if elector else lambda: True),
    )
    namespaces = args.namespace or []
    handlers.install(
        handlers.Runtime(
            kube=kube,
            queue=queue,
            elector=elector,
            resync_seconds=float(os.environ.get("MMRL_RESYNC_SECONDS", "30")),
            namespaces=namespaces,
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
