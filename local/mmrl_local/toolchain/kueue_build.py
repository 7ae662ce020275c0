"""Kueue at the version the wrapper module ``go/kueue`` pins, built from the Go module proxy: its controller manager
(``sigs.k8s.io/kueue/cmd/kueue``, the binary Kueue's own image runs; ``kueue_incluster`` runs it in the cluster)
and a small command of ours that calls its RayCluster webhook's checks without a cluster (``kueue_webhook``).

Both come out of one cached build under ``$MMRL_CACHE/bin/kueue-<hash>``, keyed by the wrapper's go.mod, go.sum
and main.go. Compiled after the control plane (`mmrl_local build --kueue`), whose versions the wrapper selects for
every module the two share (test_go_modules_aligned.py), it finds nearly every package in the Go build cache: about
45 s on 2 cores instead of 2-3 minutes; milliseconds once cached. v0.17.0 is the newest Kueue the Go module proxy
serves here; HyperPod's task governance add-on runs 0.19, whose RayCluster integration and v1beta2 API are the
same in what mmrl uses (docs/kueue.md).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import IO

from mmrl_local.toolchain import build

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.17.0"
CHECKER = "kueue-raycluster-check"
MANAGER = "kueue-manager"
# Bump when the build below changes in a way that changes the binaries.
RECIPE = "4"


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
    build._go_build("kueue", work / CHECKER, ["."], "-s -w", log)
    # As Kueue's Makefile links it: the version its logs and metrics report.
    version = f"-s -w -X {KUEUE_MODULE}/pkg/version.GitVersion={KUEUE_VERSION}"
    build._go_build("kueue", work / MANAGER, [f"{KUEUE_MODULE}/cmd/kueue"], version, log)
    return {"kueue": f"{KUEUE_MODULE}@{KUEUE_VERSION}"}


def binaries(verbose: bool = True) -> Path:
    """The directory holding both binaries, built first when the cache lacks them."""
    return build._cached_build(build_key(), f"Kueue {KUEUE_VERSION}", _build, (CHECKER, MANAGER), verbose)


def module_dir() -> Path:
    """Kueue's module source: its CRDs, RBAC and webhook manifests (config/components)."""
    return build.module_dir(KUEUE_MODULE, KUEUE_VERSION)
