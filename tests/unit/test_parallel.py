"""A parallel run (pytest-xdist, loadgroup) keeps each group of tests/support/parallel.py in one worker, in order,
and spreads the rest. Runs real pytest-xdist workers on a small suite laid out like ours."""

from __future__ import annotations

import json

import pytest

RECORDING_TEST = """
import json, os
from pathlib import Path

def _record(name):
    with Path({out!r}).open("a") as f:
        f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")

{tests}
"""


def _file(out: str, prefix: str, count: int) -> str:
    tests = "\n".join(f"def test_{prefix}{i}():\n    _record('{prefix}{i}')\n" for i in range(count))
    return RECORDING_TEST.format(out=out, tests=tests)


def test_a_group_runs_in_one_worker_in_order_and_the_rest_spreads(pytester: pytest.Pytester) -> None:
    out = str(pytester.path / "ran.jsonl")
    pytester.makepyfile(
        **{
            "tests/cluster/test_kuberay_contract.py": _file(out, "contract", 4),
            "tests/cluster/test_demo_mlflow.py": _file(out, "mlflow", 2),
            "tests/e2e/test_demo_path.py": _file(out, "demo", 2),
            "tests/unit/test_many.py": _file(out, "unit", 12),
        }
    )
    result = pytester.runpytest_subprocess("-p", "tests.support.parallel", "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=20)
    ran = [json.loads(line) for line in (pytester.path / "ran.jsonl").read_text().splitlines()]
    real_ray = [(name, worker) for name, worker in ran if name.startswith(("mlflow", "contract"))]
    assert len({worker for _, worker in real_ray}) == 1, real_ray  # two files of one group: one worker
    assert [name for name, _ in real_ray] == ["mlflow0", "mlflow1", "contract0", "contract1", "contract2", "contract3"]
    demo = [(name, worker) for name, worker in ran if name.startswith("demo")]
    assert [name for name, _ in demo] == ["demo0", "demo1"] and len({worker for _, worker in demo}) == 1, demo
    assert len({worker for name, worker in ran if name.startswith("unit")}) == 2


def test_every_end_to_end_file_runs_in_one_of_the_two_chains() -> None:
    """Each e2e test runs real Ray or vLLM pods for minutes: outside the two chains it would run beside both, a third
    heavy test on 2 cores (test_shared_serving did, and both e2e tests ran past their timeout on a cold run)."""
    from pathlib import Path

    from tests.support.parallel import _SHARE_A_WORKER

    e2e = sorted(f"tests/e2e/{p.name}" for p in (Path(__file__).parents[1] / "e2e").glob("test_*.py"))
    assert e2e, "no e2e test files found"
    assert {f: _SHARE_A_WORKER.get(f) for f in e2e if _SHARE_A_WORKER.get(f) not in ("real-ray", "real-ray-demo")} == {}
