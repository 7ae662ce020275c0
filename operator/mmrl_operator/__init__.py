"""The mmrl operator. `core/` is the pure decision (job, observed children and nodes, now -> plan and status) with
the builders of every child object; `runtime/` runs it (kopf wiring, watch caches, work queue, leader election, API
access); `cli/` is the `mmrl` command; `codegen/` writes the CRD, the chart's RBAC and admission policies. The
layers are kept apart by tests/unit/test_package_boundaries.py."""
