"""What experiment tracking costs a training step, and how fast each sink takes a step's metrics.

- `log()` is what the training loop pays: the metrics are filtered and queued for the tracker's thread.
- Per sink, the time to take one step's metrics (12 scalars, the size of a SkyRL step's mapped set), measured by
  driving the sink directly: TensorBoard (add_scalar x12 and a flush to disk), MLflow (`log_batch` to a real
  `mlflow server` with a sqlite store on 127.0.0.1, from the MLflow venv: MMRL_MLFLOW_PYTHON) and W&B offline.
- Opening each sink (the attempt's start: MLflow creates or reopens the run, W&B starts its core process).
Printed as medians; no threshold.

    MMRL_MLFLOW_PYTHON=... python bench/tracking.py [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("WANDB_SILENT", "true")

from mmrl_api.tracking import MlflowSpec, WandbSpec
from mmrl_trainer.tracking import Tracker
from mmrl_trainer.tracking.sinks import MlflowSink, TensorBoardSink, WandbSink
from tests.support.mlflow_server import running_mlflow

METRICS = {f"m{i}": 0.5 + i for i in range(12)}


def per_call(fn, steps: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for step in range(1, steps + 1):
        t = time.perf_counter()
        fn(step)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def opened(make):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    sink = make()
    return sink, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = []
        tb, t_open = opened(lambda: TensorBoardSink(root / "job", purge_step=None))
        rows.append(("TensorBoard", t_open, per_call(lambda s: tb.log(s, METRICS), args.steps)))
        tb.close(True)
        with running_mlflow(root / "mlflow") as url:
            spec = MlflowSpec(tracking_uri=url)
            ml, t_open = opened(lambda: MlflowSink(spec, None, job="bench", namespace="bench", tags={}))
            rows.append(("MLflow (127.0.0.1, sqlite)", t_open, per_call(lambda s: ml.log(s, METRICS), args.steps)))
            ml.close(True)
            offline = WandbSpec(project="bench", mode="offline")
            wb, t_open = opened(lambda: WandbSink(offline, "bench-1", root / "wandb", job="b", config={}))
            rows.append(("W&B offline", t_open, per_call(lambda s: wb.log(s, METRICS), args.steps)))
            wb.close(True)
            tracker = Tracker([TensorBoardSink(root / "job2", purge_step=None)])
            paid = per_call(lambda s: tracker.log(s, {**METRICS, "event": "x"}), args.steps)
            t = time.perf_counter()
            tracker.close(True)
            drained = time.perf_counter() - t
    print(f"tracking, {args.steps} steps of {len(METRICS)} scalars, medians:")
    print(f"  {'sink':<28} {'open (s)':>9} {'per step (ms)':>14}")
    for name, t_open, step in rows:
        print(f"  {name:<28} {t_open:>9.2f} {step * 1000:>14.2f}")
    print(f"  the training loop pays per step: {paid * 1e6:.0f} us (Tracker.log: filter and queue)")
    print(f"  draining {args.steps} queued steps into TensorBoard at close: {drained:.2f} s")


if __name__ == "__main__":
    main()
