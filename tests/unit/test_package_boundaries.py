"""Each image holds one package plus the shared API: so the operator never imports trainer code, the trainer never
imports operator code, and the API package imports neither (nor the local tooling). Checked on the import
statements of every module, including imports inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "mmrl_api": ROOT / "api" / "mmrl_api",
    "mmrl_operator": ROOT / "operator" / "mmrl_operator",
    "mmrl_trainer": ROOT / "trainer" / "mmrl_trainer",
}
MAY_IMPORT = {
    "mmrl_api": {"mmrl_api"},
    "mmrl_operator": {"mmrl_api", "mmrl_operator"},
    "mmrl_trainer": {"mmrl_api", "mmrl_trainer"},
}
OURS = {"mmrl_api", "mmrl_operator", "mmrl_trainer", "mmrl_local"}


def our_imports(source: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [(node.lineno, name) for name in names if name.split(".")[0] in OURS]
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_package_imports_only_itself_and_the_shared_api(package: str) -> None:
    wrong = [
        f"{source.relative_to(ROOT)}:{line} imports {name}"
        for source in sorted(PACKAGES[package].rglob("*.py"))
        for line, name in our_imports(source)
        if name.split(".")[0] not in MAY_IMPORT[package]
    ]
    assert wrong == []


def test_the_scan_sees_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom mmrl_trainer.x import y\n\ndef f():\n    import mmrl_local.z\n")
    assert our_imports(module) == [(2, "mmrl_trainer.x"), (5, "mmrl_local.z")]
