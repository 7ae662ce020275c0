"""`mmrl logs NAME [--attempt N] [--follow]`: a job's trainer log, every attempt's, also after its pods are gone.

The trainer writes each attempt's log to `<jobDir>/logs/attempt-<N>.log` on the job's volume, and the Ray head pod's
`trainer-log` container prints all of them, each line prefixed `[attempt N] ` (mmrl_trainer.attempt_log). This reads
that container's log through the apiserver (`pods/log`), which Kubernetes' `view` role already grants in a namespace:
no exec, no service proxy, no access to the volume. With no head pod (the RayCluster was deleted, e.g. by
ttlSecondsAfterFinished) it says where the files lie.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from mmrl_api import constants as c
from mmrl_api.contract import ATTEMPT_LOG_CONTAINER, ATTEMPT_LOG_DIR, attempt_of_log_line
from mmrl_operator.cli.kubeconfig import ClusterOptions


def pick(lines: Iterable[str], attempt: int | None) -> Iterator[str]:
    """The trainer's lines of one attempt as it wrote them, or of every attempt with their `[attempt N]` prefix."""
    for line in lines:
        parsed = attempt_of_log_line(line)
        if parsed is None:
            continue
        if attempt is None:
            yield line
        elif parsed[0] == attempt:
            yield parsed[1]


def stream_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Complete lines from a byte stream (a followed pod log)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *done, pending = pending.split(b"\n")
        for line in done:
            yield line.decode(errors="replace")
    if pending:
        yield pending.decode(errors="replace")


def head_pod(pods: list[dict[str, Any]]) -> str | None:
    """The running head pod's name (a Terminating one is on its way out)."""
    live = [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") == "Running"
    ]
    return live[0]["metadata"]["name"] if live else None


class NoHeadPod(RuntimeError):
    pass


def read_logs(
    api: Any, namespace: str, name: str, attempt: int | None, follow: bool = False, timeout: float | None = None
) -> Iterator[str]:
    """The job's trainer log lines (see `pick`) from its head pod's `trainer-log` container; NoHeadPod says where the
    files lie when no head pod runs. `timeout` bounds each try of the (not followed) log read, in seconds."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    selector = f"{c.LABEL_JOB}={name},{c.LABEL_COMPONENT}=ray-head"
    listed = core.list_namespaced_pod(namespace, label_selector=selector).items
    pod = head_pod([api.sanitize_for_serialization(p) for p in listed])
    if pod is None:
        where = (job.get("status") or {}).get("jobDir") or "the job directory"
        raise NoHeadPod(
            f"{namespace}/{name}: no running Ray head pod to read the trainer log from; every attempt's log is on the "
            f"job's volume at {where}/{ATTEMPT_LOG_DIR}/attempt-<N>.log"
        )
    if follow:
        resp = core.read_namespaced_pod_log(
            pod, namespace, container=ATTEMPT_LOG_CONTAINER, follow=True, _preload_content=False
        )
        return pick(stream_lines(resp.stream()), attempt)
    text = core.read_namespaced_pod_log(pod, namespace, container=ATTEMPT_LOG_CONTAINER, _request_timeout=timeout)
    return pick(text.splitlines(), attempt)


def show_logs(name: str, opts: ClusterOptions, attempt: int | None, follow: bool, out: TextIO | None = None) -> int:
    from mmrl_operator.cli.cluster import connect

    api, namespace = connect(opts)
    out = out or sys.stdout
    try:
        for line in read_logs(api, namespace, name, attempt, follow):
            print(line, file=out, flush=follow)
    except NoHeadPod as err:
        print(err, file=sys.stderr)
        return 1
    return 0
