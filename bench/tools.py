"""Tools the benchmarks need beyond the project's venv, each in its own venv cached under $MMRL_CACHE and keyed by
what is installed into it, so `make bench` on a clean clone installs them and later runs reuse them."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

PY_SPY = "py-spy==0.4.2"


def cache_root() -> Path:
    return Path(os.environ.get("MMRL_CACHE", Path.home() / ".cache" / "mmrl"))


def tool_venv(requirements: list[str], *, system_site_packages: bool = False) -> Path:
    """A venv with `requirements` installed from PyPI (built once; a marker file says it is complete)."""
    key = hashlib.sha256(f"{sys.version_info[:2]} {system_site_packages} {sorted(requirements)}".encode()).hexdigest()
    venv = cache_root() / f"bench-venv-{key[:12]}"
    if not (venv / ".complete").exists():
        args = [sys.executable, "-m", "venv", "--clear", str(venv)]
        subprocess.run(args + (["--system-site-packages"] if system_site_packages else []), check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *requirements], check=True)
        (venv / ".complete").touch()
    return venv


def py_spy() -> Path:
    return tool_venv([PY_SPY]) / "bin" / "py-spy"
