"""The chart's values, schema and versions agree with each other and with the project (no helm needed; the rendered
chart is tested against helm and the apiserver in tests/cluster/test_chart.py)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from mmrl_operator.codegen import chart

ROOT = Path(__file__).resolve().parents[3]
VALUES = yaml.safe_load((chart.CHART_DIR / "values.yaml").read_text())
SCHEMA = json.loads((chart.CHART_DIR / "values.schema.json").read_text())


def errors(values: dict) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(values)]


def test_default_values_satisfy_the_schema() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert errors(VALUES) == []


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"watchNamespace": ["team-a"]}, "watchNamespace"),
        ({"watchNamespaces": ["Team_A"]}, "Team_A"),
        ({"crds": {"enabled": "yes"}}, "'yes' is not of type 'boolean'"),
        ({"operator": {"logLevel": "verbose"}}, "verbose"),
        ({"ports": {"metrics": 0, "health": 8080}}, "0 is less than the minimum"),
    ],
)
def test_schema_rejects_values_that_would_render_a_broken_release(change: dict, complaint: str) -> None:
    assert any(complaint in e for e in errors({**VALUES, **change})), errors({**VALUES, **change})


def test_chart_app_version_is_the_project_version() -> None:
    meta = yaml.safe_load((chart.CHART_DIR / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert meta["appVersion"] == project
    assert VALUES["image"]["tag"] == ""  # the image tag follows appVersion unless overridden


def test_values_ports_are_the_ports_the_operator_dockerfile_exposes() -> None:
    dockerfile = (ROOT / "docker" / "operator.Dockerfile").read_text()
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", dockerfile, re.M).group(1).split()}
    assert set(VALUES["ports"].values()) == exposed


def test_generated_templates_are_fresh() -> None:
    for rel, text in chart.render().items():
        assert (chart.CHART_DIR / rel).read_text() == text, f"{rel} is stale: run `make crds`"


def test_the_chart_is_secure_by_default() -> None:
    """The spec-patch and server-pod policies, each job's NetworkPolicy and the user roles are on unless the platform
    turns them off."""
    assert VALUES["specPatchPolicy"]["enabled"] is True
    assert VALUES["serverPodPolicy"]["enabled"] is True
    assert VALUES["networkPolicy"]["enabled"] is True
    assert VALUES["aggregatedRoles"]["enabled"] is True
    assert VALUES["trainerStatusPolicy"]["enabled"] is True
