"""A connection to the cluster for the commands that need one (status, logs, plot, chat, rollback).

The context and namespace are chosen by `kubeconfig` (kubectl's rules, `--kubeconfig`, `--context`, `-n`), and the
Kubernetes client is told that context by name, so the namespace printed and the cluster asked always belong
together. Inside a pod without a kubeconfig the pod's service account is used, as kubectl does.
"""

from __future__ import annotations

from typing import Any

from mmrl_operator.cli.kubeconfig import (
    IN_CLUSTER_NAMESPACE,
    NAMESPACE_DEFAULT,
    ClusterOptions,
    KubeconfigError,
    in_cluster,
    read_kubeconfig,
)


def connect(opts: ClusterOptions) -> tuple[Any, str]:
    """(kubernetes.client.ApiClient, namespace). KubeconfigError when there is no usable configuration."""
    from kubernetes import client, config

    try:
        kubeconfig = read_kubeconfig(opts.kubeconfig)
    except KubeconfigError:
        if opts.kubeconfig or opts.context or not in_cluster():
            raise
        config.load_incluster_config()
        namespace = opts.namespace or IN_CLUSTER_NAMESPACE.read_text().strip() or NAMESPACE_DEFAULT
        return client.ApiClient(), namespace
    name, context = kubeconfig.context(opts.context)
    if name is None:
        raise KubeconfigError(f"{kubeconfig.where()}: no current-context is set; pass --context NAME")
    api = config.new_client_from_config(config_file=kubeconfig.where(), context=name)
    return api, opts.namespace or str(context.get("namespace") or NAMESPACE_DEFAULT)
