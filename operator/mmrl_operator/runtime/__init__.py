"""The running operator: kopf wiring, watch caches, the work queue, leader election, API access and the
reconcile of one job around the pure decision (mmrl_operator.core)."""
