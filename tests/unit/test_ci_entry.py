"""`.ci/run`, CI's entry point, runs as CI: it exports CI=true (which turns every skip into a failure and fixes the
property tests' seed) and runs `make test` from the checkout's root, even on a runner that sets no CI variable.
The real script runs, with a stub `make` first on PATH that records what it was started with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUB_MAKE = """#!/bin/sh
{ echo "CI=${CI-<unset>}"; echo "cwd=$(pwd)"; for arg in "$@"; do echo "arg=$arg"; done; } > "$MAKE_RECORD"
"""


def test_ci_run_exports_ci_true_and_runs_make_test_from_the_root(tmp_path: Path) -> None:
    stub = tmp_path / "bin" / "make"
    stub.parent.mkdir()
    stub.write_text(STUB_MAKE)
    stub.chmod(0o755)
    record = tmp_path / "make.record"
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PATH=f"{stub.parent}{os.pathsep}{env['PATH']}", MAKE_RECORD=str(record))
    done = subprocess.run([str(ROOT / ".ci" / "run")], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # Exactly `make test`: no other target, no variable that narrows or weakens it.
    assert record.read_text().splitlines() == ["CI=true", f"cwd={ROOT}", "arg=test"]
