"""Read one metric from a Prometheus text endpoint (the mmrl operator's, KubeRay's): the sum of its samples."""

from __future__ import annotations

import urllib.request


def metric_sum(url: str, name: str) -> float:
    """Sum of every sample of ``name`` (any labels) at ``url``; 0 when the endpoint does not export it."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    )
