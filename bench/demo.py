"""The demo's phases on the real KubeRay and Ray (issue #20): runs `python -m mmrl_local.demo` (warm caches
assumed; the first run also compiles) and records its phase timings, taken by the demo itself from cluster state
and the trainer's progress: control plane up, Ray head ready, first training step, fault → next attempt running,
fault → first new step, training end → InferenceReady, and the whole run. A summary.json of an earlier demo run can
be recorded instead with --summary.

    python bench/demo.py [--summary demo-out/summary.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import common

TARGET_WALL_S = 360.0  # `make demo` with warm caches on 2 cores
TARGET_RESUME_RATIO = 2.0  # fault → first new step ≤ 2x a cold start's time to its first step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", type=Path, help="record this demo summary.json instead of running the demo")
    args = parser.parse_args()
    summary_path = args.summary
    if summary_path is None:
        out = common.RESULTS / "demo-run"
        subprocess.run([sys.executable, "-m", "mmrl_local.demo", "--out", str(out)], check=True, cwd=common.ROOT)
        summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text())
    timings = {k: round(v, 1) for k, v in summary["timings"].items()}
    first_step, resumed = timings.get("first step"), timings.get("fault -> first new step")
    result = {
        "wall_s": round(summary["wall_seconds"], 1),
        "timings_s": timings,
        "resume_ratio": round(resumed / first_step, 2) if first_step and resumed else None,
        "phase": summary["phase"],
        "submissions": summary.get("submissions") or {},
        "targets": {"wall_s": TARGET_WALL_S, "resume_ratio": TARGET_RESUME_RATIO},
        "machine": common.machine(),
    }
    print(json.dumps(result, indent=2))
    common.write_result("demo", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
