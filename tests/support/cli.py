"""The `mmrl` command as a user types it, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def mmrl(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """The CLI with no kubeconfig of its own: only what the arguments name (`--kubeconfig`, `--context`, `-n`)."""
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(home / "no-kubeconfig")}
    return subprocess.run(
        [sys.executable, "-m", "mmrl_operator.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )
