"""The job's tracking runs, kept in `<jobDir>/tracking/runs.json` so that every attempt logs into the same runs.

One entry per sink: `{"mlflow": {"runId", "experimentId", "trackingUri", "url"}, "wandb": {"runId", "url"}}`. It is
written whole and atomically (a new file renamed over the old), so a pod killed mid-write leaves the previous
version, never half of one.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

RUNS_FILE = "runs.json"
TRACKING_DIR = "tracking"
log = logging.getLogger("mmrl_trainer.tracking")


def tracking_dir(job_dir: str | Path) -> Path:
    return Path(str(job_dir).removeprefix("file://")) / TRACKING_DIR


def read_runs(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / RUNS_FILE).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("%s unreadable, starting new runs: %s", directory / RUNS_FILE, err)
        return {}
    return data if isinstance(data, dict) else {}


def write_runs(directory: Path, runs: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{RUNS_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(runs, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, directory / RUNS_FILE)


def wandb_run_id(namespace: str, name: str, uid: str) -> str:
    """A W&B run id of the job: stable across attempts and unique across re-creations of the same name (the uid).
    W&B ids may hold letters, digits, '-' and '_' (at most 64 here)."""
    base = re.sub(r"[^A-Za-z0-9_-]", "-", f"{namespace}-{name}")[:55]
    return f"{base}-{uid.replace('-', '')[:8]}" if uid else base
