"""`mmrl_api` loads its models on first use (PEP 562): its name table, `__all__` (which static tools read) and the
names themselves must agree, and importing the package or its constants must build no model (issue #32: the
operator lists the cluster before it needs one)."""

from __future__ import annotations

import subprocess
import sys

import mmrl_api


def test_every_exported_name_is_in_the_table_and_resolves_to_its_modules_object() -> None:
    assert sorted(mmrl_api.__all__) == sorted(mmrl_api._WHERE)
    for name, module in mmrl_api._WHERE.items():
        assert getattr(mmrl_api, name) is getattr(__import__(f"mmrl_api.{module}", fromlist=[name]), name)


def test_importing_the_constants_builds_no_model() -> None:
    code = (
        "import sys; from mmrl_api import constants; print(sorted(m for m in sys.modules if m.startswith('mmrl_api')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['mmrl_api', 'mmrl_api.constants']"
