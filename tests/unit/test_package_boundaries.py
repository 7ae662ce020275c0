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


# The operator's layers: the pure core (decisions and builders) imports none of the others and no client, server or
# network library; the runtime runs the core; the CLI may use both; the generators read the core and the permission
# table the runtime checks its calls against. The gateway (a ModelServer replica's, run from the operator's image)
# stands alone: the shared API and HTTP, no Kubernetes client and no kopf.
OPERATOR = PACKAGES["mmrl_operator"]
LAYERS_MAY_IMPORT = {
    "core": {"core"},
    "runtime": {"core", "runtime"},
    "cli": {"core", "runtime", "cli"},
    "codegen": {"core", "codegen", "runtime.permissions"},
    "gateway": {"gateway"},
}
IO_LIBRARIES = {"kubernetes", "kopf", "aiohttp", "urllib3", "requests", "socket", "http", "prometheus_client", "mlflow"}


def layer_of(source: Path) -> str:
    parts = source.relative_to(OPERATOR).parts
    return parts[0] if len(parts) > 1 else ""


def imported_modules(source: Path) -> list[tuple[int, str]]:
    """Every module an import statement names, `from a import b` as both `a` and `a.b` (b may be a module)."""
    found = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def test_every_operator_module_is_in_a_layer() -> None:
    assert {p.relative_to(OPERATOR).as_posix() for p in OPERATOR.glob("*.py")} == {"__init__.py"}
    assert {layer_of(p) for p in OPERATOR.rglob("*.py")} - {""} == set(LAYERS_MAY_IMPORT)


def layer_violations(
    layer: str, sources: list[Path], package: str = "mmrl_operator", table: dict[str, set[str]] | None = None
) -> list[str]:
    allowed = (table or LAYERS_MAY_IMPORT)[layer]
    wrong = []
    for source in sources:
        for line, name in imported_modules(source):
            parts = name.split(".")
            if parts[0] != package or len(parts) == 1:
                continue
            inner = ".".join(parts[1:])
            if not any(inner == a or inner.startswith(f"{a}.") or a.startswith(f"{inner}.") for a in allowed):
                wrong.append(f"{source.name}:{line} imports {name}")
    return wrong


@pytest.mark.parametrize("layer", sorted(LAYERS_MAY_IMPORT))
def test_an_operator_layer_imports_only_the_layers_below_it(layer: str) -> None:
    assert layer_violations(layer, sorted((OPERATOR / layer).rglob("*.py"))) == []


def test_the_core_does_no_io() -> None:
    wrong = [
        f"{source.relative_to(ROOT)}:{line} imports {name}"
        for source in sorted((OPERATOR / "core").rglob("*.py"))
        for line, name in imported_modules(source)
        if name.split(".")[0] in IO_LIBRARIES
    ]
    assert wrong == []


def test_the_gateway_needs_no_kubernetes_client_and_no_kopf() -> None:
    wrong = [
        f"{source.relative_to(ROOT)}:{line} imports {name}"
        for source in sorted((OPERATOR / "gateway").rglob("*.py"))
        for line, name in imported_modules(source)
        if name.split(".")[0] in {"kubernetes", "kopf", "urllib3", "requests", "prometheus_client"}
    ]
    assert wrong == []


def test_the_layer_check_sees_a_wrong_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from mmrl_operator.runtime import kube\n\ndef f():\n    import kubernetes.client\n")
    assert imported_modules(module) == [
        (1, "mmrl_operator.runtime"),
        (1, "mmrl_operator.runtime.kube"),
        (4, "kubernetes.client"),
    ]
    assert layer_violations("core", [module]) == [
        "m.py:1 imports mmrl_operator.runtime",
        "m.py:1 imports mmrl_operator.runtime.kube",
    ]
    assert layer_violations("codegen", [module]) == ["m.py:1 imports mmrl_operator.runtime.kube"]
    assert layer_violations("cli", [module]) == []


# The local harness's layers (local/mmrl_local/__init__.py says what each is): each subpackage imports only itself and
# those below it; the top-level modules (entry points: __main__, demo, leftovers...) may use any.
LOCAL = ROOT / "local" / "mmrl_local"
LOCAL_LAYERS_MAY_IMPORT = {
    "common": {"common"},
    "toolchain": {"common", "toolchain"},
    "network": {"common", "network"},
    "cluster": {"common", "toolchain", "network", "cluster"},
    "node": {"common", "toolchain", "network", "cluster", "node"},
    "standin": {"common", "network", "cluster", "node", "standin"},
    "addons": {"common", "toolchain", "network", "cluster", "node", "standin", "addons"},
}


def test_every_local_subpackage_is_a_layer() -> None:
    subpackages = {p.parent.name for p in LOCAL.glob("*/__init__.py")}
    assert subpackages == set(LOCAL_LAYERS_MAY_IMPORT)
    deeper = [p.relative_to(LOCAL).as_posix() for p in LOCAL.rglob("*.py") if len(p.relative_to(LOCAL).parts) > 2]
    assert deeper == []


@pytest.mark.parametrize("layer", sorted(LOCAL_LAYERS_MAY_IMPORT))
def test_a_local_layer_imports_only_the_layers_below_it(layer: str) -> None:
    sources = sorted((LOCAL / layer).rglob("*.py"))
    assert layer_violations(layer, sources, "mmrl_local", LOCAL_LAYERS_MAY_IMPORT) == []


def test_the_local_layer_check_sees_a_wrong_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from mmrl_local.node import kubelet\nfrom mmrl_local.common import procs\n")
    assert layer_violations("cluster", [module], "mmrl_local", LOCAL_LAYERS_MAY_IMPORT) == [
        "m.py:1 imports mmrl_local.node",
        "m.py:1 imports mmrl_local.node.kubelet",
    ]
    assert layer_violations("node", [module], "mmrl_local", LOCAL_LAYERS_MAY_IMPORT) == []
