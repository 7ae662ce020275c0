"""Prometheus metrics of the operator: jobs by phase, reconcile duration, attempts and restarts by cause."""

from __future__ import annotations

from collections import Counter as _Tally

from prometheus_client import Counter, Gauge, Histogram

JOBS = Gauge("mmrl_jobs", "MultimodalRLJobs by phase", ["phase"])
RECONCILE_SECONDS = Histogram(
    "mmrl_reconcile_duration_seconds", "Time of one reconcile pass", buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
)
RECONCILE_ERRORS = Counter("mmrl_reconcile_errors_total", "Reconcile passes that raised")
ATTEMPTS = Counter("mmrl_attempts_started_total", "Training attempts started")
RESTARTS = Counter("mmrl_restarts_total", "Failed attempts by cause", ["cause"])
STATUS_CONFLICTS = Counter("mmrl_status_conflicts_total", "Status writes refused because the job changed meanwhile")
PROGRESS_ONLY_EVENTS = Counter(
    "mmrl_progress_only_events_total", "Job updates that changed only the trainer's progress (no reconcile queued)"
)
FRESH_READS = Counter(
    "mmrl_fresh_reads_total", "Passes whose cached view would start or stop an attempt, decided again on fresh LISTs"
)
NODE_FAULTS = Counter("mmrl_node_faults_total", "Node faults seen on nodes hosting job pods")
API_REQUESTS = Counter("mmrl_api_requests_total", "Requests the operator's reconcile passes made to the apiserver")
API_WRITES = Counter("mmrl_api_writes_total", "Writes (applies, deletes, status patches) the apiserver accepted")
LEADER = Gauge("mmrl_leader", "1 while this replica holds the Lease and acts (always 1 with --standalone)")
STANDING_BY = Gauge(
    "mmrl_queue_standing_by", "Jobs that came due while this replica stood by, all run the moment it leads"
)

_EVENT_COUNTERS = {
    "AttemptStarted": lambda: ATTEMPTS.inc(),
    "NodeFault": lambda: NODE_FAULTS.inc(),
}


def record_event(reason: str) -> None:
    action = _EVENT_COUNTERS.get(reason)
    if action:
        action()


def record_restarts(before: dict[str, int], after: dict[str, int]) -> None:
    for cause, count in after.items():
        if count > before.get(cause, 0):
            RESTARTS.labels(cause=cause).inc(count - before.get(cause, 0))


def set_phases(phases: list[str]) -> None:
    from mmrl_api.status import PHASES

    tally = _Tally(phases)
    for phase in PHASES:
        JOBS.labels(phase=phase).set(tally.get(phase, 0))
