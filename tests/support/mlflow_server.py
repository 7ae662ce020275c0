"""A real MLflow tracking server for tests: mlflow's own `mlflow server` with a sqlite store, on 127.0.0.1.

It runs from its own venv (`make mlflow-venv`, found through MMRL_MLFLOW_PYTHON): the server distribution pins a
pyarrow below the main lock's, and the trainer needs only the client. Tests fail, not skip, without it.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mmrl_local.addons.mlflow_server import SERVER_ENV
from mmrl_local.cluster.controlplane import free_port


def mlflow_python() -> str:
    python = os.environ.get("MMRL_MLFLOW_PYTHON", "")
    assert python and Path(python).is_file(), (
        f"no MLflow server venv (MMRL_MLFLOW_PYTHON={python!r}): run the tests through make, which builds it "
        "(make mlflow-venv)"
    )
    return python


@contextmanager
def running_mlflow(store: Path) -> Iterator[str]:
    """Start a tracking server whose runs live in `store`; yields its URL."""
    store.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(store / "server.log", "w")  # noqa: SIM115 - closed below, after the server
    env = {**os.environ, **SERVER_ENV, "DO_NOT_TRACK": "1", "PYTHONPATH": ""}
    proc = subprocess.Popen(
        [
            *(mlflow_python(), "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
            *("--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}", "--default-artifact-root", str(store / "art")),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    tail = (store / "server.log").read_text()[-2000:]
                    raise RuntimeError(f"mlflow server did not start: {tail}") from None
                time.sleep(0.5)
        # MLflow launches its job runner right after the server process, before /health answers: none may be there.
        extra = [cmd for cmd in _session_commands(proc.pid) if "_job_runner" in cmd or "huey_consumer" in cmd]
        if extra:
            raise RuntimeError(f"the MLflow server runs its job runner, though SERVER_ENV turns it off: {extra}")
        yield url
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()


def _session_commands(sid: int) -> list[str]:
    """The command lines of the processes in session `sid` (the server was started in a session of its own)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or os.getsid(int(entry.name)) != sid:
                continue
            found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, ValueError):
            continue
    return found
