"""The pure core: the decision of one pass (job, observed children and nodes, now) -> plan and status, and
what it reads. No I/O, no Kubernetes client, no kopf (tests/unit/test_package_boundaries.py)."""
