"""Make every test, and every process a test starts (operator, trainer, stand-in entrypoints), import this
checkout's sources — not whichever checkout last ran `pip install -e .` into the shared cached venv."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [str(ROOT / d) for d in ("api", "operator", "trainer", "local")]
os.environ["PYTHONPATH"] = os.pathsep.join([*SOURCES, str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

# Control plane, namespace, nodes, stand-in and operator fixtures for tests/cluster and tests/e2e (lazy: unit tests
# never start anything).
pytest_plugins = ["tests.support.cluster_fixtures"]
