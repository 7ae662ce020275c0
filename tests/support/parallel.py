"""How a parallel run (pytest-xdist, `TEST_WORKERS=N make test`) hands out tests: long groups first, and the files
that must not run beside each other (or must share one process) in one worker, one test at a time."""

from __future__ import annotations

import pytest

# In a parallel run the long tests go first and the many short ones last, where they fill the workers' tails.
_PARALLEL_ORDER = ("tests/e2e", "tests/cluster", "tests/trainer", "tests/skyrl")
# Files whose tests run in one parallel worker, one at a time, in collection order:
# - real-ray-demo and real-ray: the tests that run real Ray (and vLLM, MLflow) pods take a core or more each for
#   minutes; the others mostly wait on the apiserver. Two such chains, never more, run beside each other: one chain
#   was the whole run's critical path (about 20 of its minutes), and a third would starve this 2-core machine. The
#   KubeRay contract test's per-scenario comparisons read what its two side tests recorded in that process. The
#   SkyRL image-features test serves a real vLLM for minutes too, and the shared-serving e2e test trains two jobs
#   and serves them from a real vLLM (outside a chain it made a third, and on a cold run both e2e tests ran past
#   their 900 s beside each other). The gateway's contract test serves a real vLLM.
# - leftover-names: both files add unregistered namespaces and links that the other's snapshots would count.
_SHARE_A_WORKER = {
    "tests/e2e/test_demo_path.py": "real-ray-demo",
    "tests/e2e/test_shared_serving.py": "real-ray",
    "tests/e2e/test_gateway_vllm.py": "real-ray-demo",
    "tests/cluster/test_demo_mlflow.py": "real-ray",
    "tests/cluster/test_kuberay_contract.py": "real-ray",
    "tests/cluster/test_real_kuberay.py": "real-ray",
    "tests/skyrl/test_skyrl_image_features.py": "real-ray-demo",
    "tests/unit/local/test_leftovers.py": "leftover-names",
    "tests/unit/test_leftovers_check.py": "leftover-names",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        ranks = (i for i, group in enumerate(_PARALLEL_ORDER) if path.startswith(group + "/"))
        return next(ranks, len(_PARALLEL_ORDER))

    items.sort(key=rank)  # stable: each group keeps its own order


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """`--dist loadgroup` with the groups of `_SHARE_A_WORKER`, by path. pytest-xdist 3.8 groups by rewriting each
    item's `_nodeid`, which pytest 9.2 no longer reads (it keeps `_id`), so xdist_group marks group nothing; the
    scheduler's scope function is xdist's own hook for this. Every other test is a scope of its own, as in `load`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedWorkers(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _SHARE_A_WORKER.get(nodeid.split("::", 1)[0], nodeid)

    return SharedWorkers(config, log)
