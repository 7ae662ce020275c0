"""mmrl's local harness (development only, never in the wheel): a laptop-sized real Kubernetes control plane built
from Go modules, and what runs on it.

One subpackage per concern, each importing only those below it (tests/unit/test_package_boundaries.py holds this):
``common`` (processes, loops, API plumbing), ``toolchain`` (what `make` builds and caches: binaries, venvs, images),
``network`` (the pod network), ``cluster`` (control plane, CRDs, fake HyperPod nodes, storage), ``node`` (the local
kubelet and the pods it runs for real), ``standin`` (the fast KubeRay stand-in) and ``addons`` (the real KubeRay,
Kueue, MLflow and the operator run against the cluster). The top-level modules are the entry points: ``__main__``
(build, images, up, down), ``demo`` and ``demo_shared`` (`make demo`), ``ask`` (a client of the served model) and
``leftovers`` (what a run left behind).
"""
