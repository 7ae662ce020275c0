"""Kueue's own RayCluster admission checks, run on RayClusters without a cluster (wrapper module ``go/kueue``).

The wrapper's command feeds RayClusters to the validating webhook of the pinned Kueue module (``ValidateCreate``,
``ValidateUpdate``; default feature gates and configuration) and prints its verdicts. Tests use it to check that
what mmrl refuses at admission because "Kueue would refuse it" is what Kueue refuses, and that every RayCluster
mmrl builds from a spec it accepts is one Kueue accepts. Built with Kueue's controller (``kueue_build``) on first use.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from mmrl_local.toolchain import kueue_build


def binary(verbose: bool = True) -> Path:
    return kueue_build.binaries(verbose) / kueue_build.CHECKER


def verdicts(requests: list[dict[str, Any]]) -> list[str]:
    """For each ``{"new": raycluster}`` (a create) or ``{"old": ..., "new": ...}`` (an update): "" where Kueue's
    webhook admits it, else its error message."""
    out = subprocess.run(
        [str(binary())], input=json.dumps(requests), capture_output=True, text=True, check=True, timeout=120
    )
    result = json.loads(out.stdout)
    if len(result) != len(requests):
        raise RuntimeError(f"{kueue_build.CHECKER} answered {len(result)} of {len(requests)} requests: {out.stderr}")
    return result
