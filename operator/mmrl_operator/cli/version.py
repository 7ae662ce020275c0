"""The version `mmrl --version` and `mmrl render` print: the installed distribution's, else the source tree's."""

from __future__ import annotations

DISTRIBUTION = "mmrl-operator"
"""The name pyproject.toml gives the distribution (`pip install mmrl-operator`): `mmrl` on the package index is
another project."""
__version__ = "0.1.0"
"""pyproject.toml's version, for a run from a checkout (tests/unit/packaging/test_distribution.py keeps them equal)."""


def mmrl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a checkout (PYTHONPATH), not installed
        return __version__
