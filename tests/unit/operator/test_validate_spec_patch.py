"""`mmrl validate` judges a job's specPatch as the chart's admission policy does (on by default, as in the chart),
naming the field; `--spec-patch-policy off` accepts what a platform without the policy admits. The live agreement is
tests/cluster/test_spec_patch_policy.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from mmrl_operator.cli.main import main
from tests.support.corpus import example

PATCH = "spec.cluster.podTemplate.specPatch"


def write(tmp_path: Path, spec_patch: dict) -> Path:
    doc = example()
    doc["spec"]["cluster"].setdefault("podTemplate", {})["specPatch"] = spec_patch
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run(*argv: str, capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_validate_refuses_a_spec_patch_the_default_policy_refuses(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, {"hostNetwork": True, "volumes": [{"name": "root", "hostPath": {"path": "/"}}]})
    code, _, err = run("validate", "-f", str(path), capsys=capsys)
    assert code == 1
    assert f"{PATCH}.hostNetwork: a specPatch may not put the Ray pods in the node's namespaces" in err
    assert f"{PATCH}.volumes[].hostPath: a specPatch may not mount a path of the node" in err


def test_with_the_policy_off_validate_accepts_it(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, {"hostNetwork": True})
    code, out, err = run("validate", "-f", str(path), "--spec-patch-policy", "off", capsys=capsys)
    assert code == 0, err
    assert ": ok: " in out


def test_a_clean_spec_patch_passes(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, {"terminationGracePeriodSeconds": 60, "volumes": [{"name": "s", "emptyDir": {}}]})
    code, _, err = run("validate", "-f", str(path), capsys=capsys)
    assert code == 0, err
