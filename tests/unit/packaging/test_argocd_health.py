"""The Argo CD health checks for MultimodalRLJob and ModelServer, run the way Argo CD runs them.

Argo CD hands a health script the live object as the global `obj` (JSON decoded into Lua tables: objects keyed by
name, arrays 1-based, nulls absent) inside a Lua 5.1 VM and reads back the table the script returns. Scripts from
argocd-cm get only the base, package and table libraries plus a two-function `os`; built-in checks get all of
Lua's libraries. Every case in health_test.yaml runs in both VMs (lupa's Lua 5.1) and must produce exactly the
expected status and message. The cases must use every testdata file, cover every phase the operator can report,
and docs/argocd.md must carry the same scripts that the chart ships.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from lupa import lua51 as lupa

from mmrl_api.model_server import ModelServerStatus
from mmrl_api.status import PHASES

SERVER_PHASES: tuple[str, ...] = get_args(ModelServerStatus.model_fields["phase"].annotation)[0].__args__

ROOT = Path(__file__).resolve().parents[3]
ARGOCD_DIR = ROOT / "charts" / "mmrl-operator" / "argocd" / "mmrl.dev"
DOC = ROOT / "docs" / "argocd.md"
ARGO_HEALTH_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
# Each kind's check: its directory, and every phase its operator can write.
PHASES_OF = {"MultimodalRLJob": PHASES, "ModelServer": SERVER_PHASES}
KINDS = sorted(PHASES_OF)


def check_dir(kind: str) -> Path:
    return ARGOCD_DIR / kind


def script(kind: str) -> str:
    return (check_dir(kind) / "health.lua").read_text()


class _JsonLikeLoader(yaml.SafeLoader):
    """YAML as the apiserver's JSON would carry it: timestamps stay strings."""


_JsonLikeLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


def _load(path: Path) -> Any:
    with path.open() as handle:
        return yaml.load(handle, Loader=_JsonLikeLoader)


def cases(kind: str) -> list[dict[str, Any]]:
    return _load(check_dir(kind) / "health_test.yaml")["tests"]  # type: ignore[no-any-return]


ALL_CASES = [(kind, case) for kind in KINDS for case in cases(kind)]


def _to_lua(lua: Any, value: Any) -> Any:
    """Python (from YAML) to Lua the way Argo CD's decodeValue does it: maps to tables keyed by string, lists to
    tables indexed from 1, None to nil (a key holding null is simply absent), scalars to Lua scalars."""
    if isinstance(value, dict):
        table = lua.table()
        for key, item in value.items():
            if item is not None:
                table[key] = _to_lua(lua, item)
        return table
    if isinstance(value, list):
        table = lua.table()
        for index, item in enumerate(value, start=1):
            if item is not None:
                table[index] = _to_lua(lua, item)
        return table
    return value


def _argocd_cm_vm() -> Any:
    """A VM with what Argo CD opens for argocd-cm scripts: base, package, table and an `os` of time and date."""
    lua = lupa.LuaRuntime()
    lua.execute(
        """
        local safe_os = { time = os.time, date = os.date }
        getmetatable("").__index = nil  -- ("x"):upper() needs the string library, which is not opened
        string, math, io, debug, coroutine = nil, nil, nil, nil, nil
        os = safe_os
        package.loaded.string, package.loaded.math, package.loaded.io = nil, nil, nil
        package.loaded.debug, package.loaded.coroutine, package.loaded.os = nil, nil, safe_os
        """
    )
    return lua


def _builtin_vm() -> Any:
    """A VM with every standard library, as Argo CD gives its built-in checks."""
    return lupa.LuaRuntime()


def _assess(lua: Any, obj: Any, kind: str = "MultimodalRLJob") -> tuple[Any, Any]:
    lua.globals().obj = _to_lua(lua, obj)
    result = lua.execute(script(kind))
    assert lupa.lua_type(result) == "table", "the script must return a table"
    return result["status"], result["message"]


@pytest.mark.parametrize("vm", [_argocd_cm_vm, _builtin_vm], ids=["argocd-cm", "built-in"])
@pytest.mark.parametrize(("kind", "case"), ALL_CASES, ids=[f"{k}-{Path(c['inputPath']).stem}" for k, c in ALL_CASES])
def test_health_script_reports_the_expected_status_and_message(kind: str, case: dict[str, Any], vm: Any) -> None:
    obj = _load(check_dir(kind) / case["inputPath"])
    status, message = _assess(vm(), obj, kind)
    assert status == case["healthStatus"]["status"]
    assert message == case["healthStatus"]["message"]


def test_every_expected_status_is_one_argo_cd_accepts() -> None:
    assert {c["healthStatus"]["status"] for _, c in ALL_CASES} <= ARGO_HEALTH_STATUSES


def test_every_expected_message_is_a_non_empty_single_line() -> None:
    for _, case in ALL_CASES:
        message = case["healthStatus"]["message"]
        assert isinstance(message, str) and message.strip() and "\n" not in message, case["inputPath"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_testdata_file_is_used_exactly_once(kind: str) -> None:
    used = [c["inputPath"] for c in cases(kind)]
    on_disk = sorted(f"testdata/{p.name}" for p in (check_dir(kind) / "testdata").glob("*.yaml"))
    assert sorted(used) == on_disk
    assert len(set(used)) == len(used)


@pytest.mark.parametrize("kind", KINDS)
def test_every_testdata_file_is_a_whole_object_of_its_kind(kind: str) -> None:
    for path in sorted((check_dir(kind) / "testdata").glob("*.yaml")):
        obj = _load(path)
        assert obj["apiVersion"] == "mmrl.dev/v1alpha1", path.name
        assert obj["kind"] == kind, path.name
        assert obj["metadata"]["name"] and isinstance(obj["metadata"]["generation"], int), path.name
        assert isinstance(obj["spec"], dict), path.name


@pytest.mark.parametrize("kind", KINDS)
def test_every_operator_phase_has_a_case_with_a_known_health(kind: str) -> None:
    # Every phase the operator can write must be covered by a case that the script understands (not Unknown).
    covered: set[str] = set()
    for case in cases(kind):
        status = _load(check_dir(kind) / case["inputPath"]).get("status")
        if isinstance(status, dict) and case["healthStatus"]["status"] != "Unknown":
            covered.add(status.get("phase"))
    missing = [phase for phase in PHASES_OF[kind] if phase not in covered]
    assert not missing, f"no {kind} health_test.yaml case for phases {missing}"


def test_node_faults_never_make_the_job_degraded() -> None:
    for case in cases("MultimodalRLJob"):
        job = _load(check_dir("MultimodalRLJob") / case["inputPath"])
        status = job.get("status")
        if not isinstance(status, dict):
            continue
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or [] if isinstance(c, dict)}
        if "True" in (conditions.get("NodeFaults"), conditions.get("Degraded")) and status.get("phase") == "Running":
            assert case["healthStatus"]["status"] == "Progressing", case["inputPath"]
            assert "node" in case["healthStatus"]["message"], case["inputPath"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_object_the_operator_has_not_seen_waits_for_its_generation_number(kind: str) -> None:
    obj = {"apiVersion": "mmrl.dev/v1alpha1", "kind": kind, "metadata": {"name": "j", "generation": 12}}
    assert _assess(_argocd_cm_vm(), obj, kind) == ("Progressing", "Waiting for the operator to observe generation 12.")


def _script_in_doc(kind: str) -> str:
    key = f"resource.customizations.health.mmrl.dev_{kind}: |"
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == key)
    indent = len(lines[start]) - len(lines[start].lstrip())
    block: list[str] = []
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line)
    return textwrap.dedent("\n".join(block)).strip() + "\n"


@pytest.mark.parametrize("kind", KINDS)
def test_the_argocd_cm_snippet_in_the_docs_is_the_shipped_script(kind: str) -> None:
    assert _script_in_doc(kind) == script(kind).strip() + "\n"


# The health each phase of a ModelServer must read as; every phase the operator writes is listed.
SERVER_HEALTH = {
    "Pending": "Progressing",
    "Deploying": "Progressing",
    "Ready": "Healthy",
    "Degraded": "Degraded",
    "ScaledToZero": "Suspended",
}


def test_what_the_server_controller_writes_reads_as_the_health_of_its_phase() -> None:
    """Both real sides: the operator's pure decision (`decide_server`) writes the status, the shipped script reads
    it. A phase or condition renamed on one side and not the other fails here."""
    from mmrl_api.model_server import parse_server
    from mmrl_operator.core.model_server import ServerObserved, decide_server

    def deployment(available: int) -> dict[str, Any]:
        ok = "True" if available == 2 else "False"
        return {
            "metadata": {"generation": 3, "annotations": {}},
            "spec": {"replicas": 2},
            "status": {
                "observedGeneration": 3,
                "replicas": 2,
                "updatedReplicas": 2,
                "availableReplicas": available,
                "readyReplicas": available,
                "conditions": [{"type": "Available", "status": ok}],
            },
        }

    scenarios = {
        "Pending": ({}, ServerObserved()),
        "Deploying": ({}, ServerObserved(deployment=deployment(1), service={})),
        "Ready": ({}, ServerObserved(deployment=deployment(2), service={})),
        "Degraded": ({}, ServerObserved(deployment=deployment(0), service={}, pod_problem=("ErrImagePull", "no"))),
        "ScaledToZero": ({"replicas": 0}, ServerObserved(deployment=deployment(2), service={})),
    }
    assert set(scenarios) == set(SERVER_PHASES) == set(SERVER_HEALTH)
    for phase, (spec, observed) in scenarios.items():
        doc = _load(check_dir("ModelServer") / "testdata" / "no-status.yaml")
        doc["metadata"]["generation"] = 3
        doc["spec"].update(spec)
        status = decide_server(parse_server(doc), observed, "2026-10-01T09:00:00Z").status
        assert status["phase"] == phase
        health, message = _assess(_argocd_cm_vm(), {**doc, "status": status}, "ModelServer")
        assert health == SERVER_HEALTH[phase], (phase, message)
