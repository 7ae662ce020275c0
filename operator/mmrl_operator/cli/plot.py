"""`mmrl plot NAME [-o reward.png]`: a job's reward curve drawn from its tracking data.

The curve is the training reward per step and the held-out reward (its step-0 point is the base model's, the last
one the final evaluation), with a marker where each later attempt started: "attempt 2: resumed from step 4". It is
read from the first source reachable from here:
1. `--dir`: a job directory (or its tracking/tensorboard) on a volume mounted here, such as an FSx mount;
2. the job's TensorBoard directory (status.tracking.tensorboard) when this machine sees the job's volume at the
   same path (the local cluster does);
3. the job's MLflow run (status.tracking.mlflow), through spec.tracking.mlflow.trackingUri with this user's own
   MLflow credentials (MLFLOW_TRACKING_USERNAME/_PASSWORD/_TOKEN), as `mlflow ui` would use them, within
   `--timeout` seconds for the whole read (bounded_mlflow.py), after which it says why it gave up.
TensorBoard's reader already drops what a failed attempt logged after the checkpoint its successor resumed from; for
MLflow, which keeps every point, the newest value of a step wins, which is the same thing.
Needs `pip install 'mmrl-operator[plot]'` (Pillow, tensorboard, mlflow-skinny); the operator image does not carry them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmrl_api import constants as c
from mmrl_operator.cli.bounded_mlflow import DEFAULT_BUDGET, Budget
from mmrl_operator.cli.kubeconfig import ClusterOptions
from mmrl_operator.cli.version import DISTRIBUTION

TRAIN, EVAL, FINAL = "reward", "eval_reward", "held_out_reward"
ATTEMPT, RESUMED = "attempt", "resumed_from_step"
TAGS = (TRAIN, EVAL, FINAL, ATTEMPT, RESUMED)
Point = tuple[int, float, float]  # step, value, wall time
READ_TIMEOUT = DEFAULT_BUDGET
"""Seconds for the whole MLflow read of `mmrl plot` (`--timeout`)."""


@dataclass
class Curves:
    source: str
    points: dict[str, list[Point]] = field(default_factory=dict)

    def series(self, tag: str) -> list[tuple[int, float]]:
        """One value per step, the newest one logged (a resumed attempt's, where two attempts logged a step)."""
        newest: dict[int, tuple[float, float]] = {}
        for step, value, wall in self.points.get(tag, []):
            if step not in newest or wall >= newest[step][1]:
                newest[step] = (value, wall)
        return sorted((step, value) for step, (value, _) in newest.items())

    def held_out(self) -> list[tuple[int, float]]:
        merged = dict(self.series(EVAL))
        merged.update(self.series(FINAL))
        return sorted(merged.items())

    def attempt_starts(self) -> list[tuple[int, int, int]]:
        """(attempt, step it started from, resumed-from step) per attempt, in order; every point kept, because the
        attempts log their start at different steps or, restarting from scratch, at the same one."""
        attempts = sorted(self.points.get(ATTEMPT, []), key=lambda p: p[2])
        resumed = sorted(self.points.get(RESUMED, []), key=lambda p: p[2])
        out = []
        for i, (step, value, _) in enumerate(attempts):
            from_step = int(resumed[i][1]) if i < len(resumed) else step
            out.append((int(value), step, from_step))
        return out

    def markers(self) -> list[tuple[float, str]]:
        out = []
        for attempt, step, from_step in self.attempt_starts():
            if attempt > 1:
                what = f"resumed from step {from_step}" if from_step else "started over"
                out.append((float(step), f"attempt {attempt}: {what}"))
        return out


def from_tensorboard(directory: Path) -> Curves:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    acc = EventAccumulator(str(directory), size_guidance={SCALARS: 0})  # 0: keep every point
    acc.Reload()
    have = set(acc.Tags()["scalars"])
    points = {t: [(e.step, e.value, e.wall_time) for e in acc.Scalars(t)] for t in TAGS if t in have}
    return Curves(f"TensorBoard files in {directory}", points)


def from_mlflow(tracking_uri: str, run_id: str, timeout: float = READ_TIMEOUT) -> Curves:
    """The run's curves, read within `timeout` seconds; TrackingReadError (a LookupError) with the cause if not."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    budget = Budget(f"MLflow run {run_id} at {tracking_uri}", timeout)
    points: dict[str, list[Point]] = {}
    for tag in TAGS:
        history = budget.call(f"metric {tag!r}", lambda tag=tag: client.get_metric_history(run_id, tag))
        points[tag] = [(m.step, m.value, m.timestamp / 1000) for m in history]
    return Curves(f"MLflow run {run_id} at {tracking_uri}", {t: p for t, p in points.items() if p})


def tensorboard_dir(path: Path) -> Path:
    """A job directory's TensorBoard directory, or the path itself when it is one."""
    inside = path / "tracking" / "tensorboard"
    return inside if inside.is_dir() else path


def find_curves(job: dict[str, Any], directory: Path | None, timeout: float = READ_TIMEOUT) -> Curves:
    tracking = (job.get("status") or {}).get("tracking") or {}
    if directory is not None:
        return from_tensorboard(tensorboard_dir(directory))
    if tracking.get("tensorboard") and Path(tracking["tensorboard"]).is_dir():
        return from_tensorboard(Path(tracking["tensorboard"]))
    mlflow_spec = ((job.get("spec") or {}).get("tracking") or {}).get("mlflow") or {}
    run = tracking.get("mlflow") or {}
    if run.get("runId") and mlflow_spec.get("trackingUri"):
        return from_mlflow(mlflow_spec["trackingUri"], run["runId"], timeout)
    where = tracking.get("tensorboard") or "<jobDir>/tracking/tensorboard"
    raise LookupError(
        f"no tracking data reachable from here: the TensorBoard files are on the job's volume at {where} (mount it "
        "and pass --dir), and the job has no MLflow run (spec.tracking.mlflow)"
    )


def draw(curves: Curves, out: Path, title: str) -> Path:
    from mmrl_operator.cli.line_chart import line_chart

    train, held_out = curves.series(TRAIN), curves.held_out()
    if not train and not held_out:
        raise LookupError(f"{curves.source}: no reward logged yet")
    values = [v for _, v in train + held_out]
    low, high = min(0.0, *values), max(1.0, *values)
    return line_chart(
        {"training reward": train, "held-out reward": held_out},
        out,
        title=title,
        x_label="step",
        y_label="reward",
        y_range=(low, high),
        markers=curves.markers(),
    )


def plot(
    job: dict[str, Any], out: Path, directory: Path | None = None, timeout: float = READ_TIMEOUT
) -> tuple[Path, Curves]:
    """Draw the job's curve from the first reachable source; LookupError when there is none or it did not answer
    within `timeout` seconds."""
    curves = find_curves(job, directory, timeout)
    meta = job.get("metadata") or {}
    return draw(curves, out, f"{meta.get('namespace', '')}/{meta.get('name', '')}: reward"), curves


def plot_job(name: str, opts: ClusterOptions, out: Path, directory: Path | None, timeout: float = READ_TIMEOUT) -> int:
    from kubernetes import client

    from mmrl_operator.cli.cluster import connect

    api, namespace = connect(opts)
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    try:
        path, curves = plot(job, out, directory, timeout)
    except (LookupError, ImportError) as exc:
        hint = f" (pip install '{DISTRIBUTION}[plot]')" if isinstance(exc, ImportError) else ""
        print(f"{namespace}/{name}: {exc}{hint}", file=sys.stderr)
        return 1
    print(f"{path}  ({curves.source}; attempts: {len(curves.attempt_starts())})")
    return 0
