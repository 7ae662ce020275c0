"""Kueue's own RayCluster admission checks, run on RayClusters without a cluster (wrapper module ``go/kueue``).

The wrapper's command feeds RayClusters to the validating webhook of the pinned Kueue module (``ValidateCreate``,
``ValidateUpdate``; default feature gates and configuration) and prints its verdicts. Tests use it to check that
what mmrl refuses at admission because "Kueue would refuse it" is what Kueue refuses, and that every RayCluster
mmrl builds from a spec it accepts is one Kueue accepts. Built on first use under ``$MMRL_CACHE/bin/kueue-<hash>``
(a few minutes on 2 cores when cold, like the real KubeRay operator), milliseconds afterwards.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import IO, Any

from mmrl_local import build

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.17.0"
BINARY = "kueue-raycluster-check"
# Bump when the build below changes in a way that changes the binary.
RECIPE = "2"


def build_key() -> str:
    digest = hashlib.sha256()
    digest.update(f"recipe={RECIPE} go={build.go_version()}\n".encode())
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update(f"kueue/{name}\n".encode())
        digest.update((build.GO_DIR / "kueue" / name).read_bytes())
    return "kueue-" + digest.hexdigest()[:16]


def _build(work: Path, log: IO[str]) -> dict:
    if f"{KUEUE_MODULE} {KUEUE_VERSION}" not in (build.GO_DIR / "kueue" / "go.mod").read_text():
        raise RuntimeError(f"{build.GO_DIR / 'kueue' / 'go.mod'} does not require {KUEUE_MODULE} {KUEUE_VERSION}")
    build._go_build("kueue", work / BINARY, ["."], "-s -w", log)
    return {"kueue": f"{KUEUE_MODULE}@{KUEUE_VERSION}"}


def binary(verbose: bool = True) -> Path:
    return build._cached_build(build_key(), "Kueue's RayCluster checks", _build, (BINARY,), verbose) / BINARY


def verdicts(requests: list[dict[str, Any]]) -> list[str]:
    """For each ``{"new": raycluster}`` (a create) or ``{"old": ..., "new": ...}`` (an update): "" where Kueue's
    webhook admits it, else its error message."""
    out = subprocess.run(
        [str(binary())], input=json.dumps(requests), capture_output=True, text=True, check=True, timeout=120
    )
    result = json.loads(out.stdout)
    if len(result) != len(requests):
        raise RuntimeError(f"{BINARY} answered {len(result)} of {len(requests)} requests: {out.stderr}")
    return result
