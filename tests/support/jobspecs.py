"""Job manifests for cluster tests: the HyperPod example shrunk to what kwok nodes can host, S3 checkpoints so no
volume has to bind (one test binds a real PV/PVC instead)."""

from __future__ import annotations

from typing import Any

from mmrl_operator.core.jsonmerge import merge_patch
from tests.support.corpus import example

# A job on more than one worker node: admission refuses multi-node SkyRL with S3 checkpoints (its engines load each
# step's adapter from a path every pod shares), so such tests train with the local backend. The operator's handling
# of clusters, nodes and attempts is the same for both backends.
MULTI_NODE = {"spec": {"trainer": {"backend": "local"}, "model": {"name": "mmrl-test/tiny-vlm"}}}
"""The local backend trains in one process on one GPU, where the reference 8B model's step of 512 completions
does not fit (its GPU memory plan, which the operator refuses): so a small model, which has no plan."""


def cluster_job(name: str, patch: dict[str, Any] | None = None, *, workers: int = 1) -> dict[str, Any]:
    base = example()
    base["metadata"] = {"name": name}
    base = merge_patch(
        base,
        {
            "spec": {
                "checkpoint": {"pvc": None, "s3": {"uri": "s3://mmrl-test/ckpt"}},
                "dataset": {"train": "synthetic://colors", "validation": None},
                "cluster": {
                    "kueue": None,
                    "head": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": None}},
                    "workerGroups": [
                        {
                            "name": "p5",
                            "replicas": workers,
                            "instanceType": "ml.p5.48xlarge",
                            "gpusPerNode": 8,
                            "efaPerNode": 32,
                            "resources": {"requests": {"cpu": "8", "memory": "32Gi"}},
                        }
                    ],
                },
                "resilience": {"backoffSeconds": 0, "maxBackoffSeconds": 0, "hangTimeoutSeconds": 0},
                "ttlSecondsAfterFinished": None,
                # Training tests end at Succeeded; the serving tests turn inference on (tests/cluster/test_serving.py).
                "inference": {"enabled": False},
            }
        },
    )
    return merge_patch(base, patch or {})
