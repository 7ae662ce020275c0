"""`mmrl render`: the objects of a job file, from the operator's own decision, without a cluster."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from mmrl_api import constants as c
from mmrl_api import validate_manifest
from mmrl_operator.cli.main import main
from mmrl_operator.cli.render import RENDER_UID, as_submitted, render_file
from mmrl_operator.core.builders.inference import build_deployment, build_service, default_adapter
from mmrl_operator.core.builders.network_policy import NetworkPolicySettings, build_network_policy
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.rayjob import build_rayjob
from mmrl_operator.core.builders.trainer_config import build_config_map
from tests.support.corpus import EXAMPLES

EVERY_CHILD = {
    ("v1", "ConfigMap"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    (c.RAY_API_VERSION, "RayCluster"),
    (c.RAY_API_VERSION, "RayJob"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
}


def rendered(path: Path, *args: str) -> list[dict]:
    out, err = io.StringIO(), io.StringIO()
    namespace = args[args.index("-n") + 1] if "-n" in args else None
    assert render_file(str(path), namespace, out, err) == 0, err.getvalue()
    return list(yaml.safe_load_all(out.getvalue()))


@pytest.mark.parametrize("example", ["job.yaml", "local.yaml"])
def test_render_prints_every_child_once_as_a_valid_kubernetes_object(example: str) -> None:
    docs = rendered(EXAMPLES / example)
    assert {(d["apiVersion"], d["kind"]) for d in docs} == EVERY_CHILD
    assert len(docs) == len(EVERY_CHILD)
    manifest = yaml.safe_load((EXAMPLES / example).read_text())
    for doc in docs:
        meta = doc["metadata"]
        assert meta["name"] and meta["namespace"] == manifest["metadata"].get("namespace", "default")
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (c.KIND, manifest["metadata"]["name"], RENDER_UID)
        assert meta["labels"][c.LABEL_JOB] == manifest["metadata"]["name"]


@pytest.mark.parametrize("example", ["job.yaml", "local.yaml"])
def test_render_is_what_the_builders_make_for_the_submitted_job(example: str) -> None:
    job, _ = validate_manifest(yaml.safe_load((EXAMPLES / example).read_text()))
    assert job is not None
    submitted = as_submitted(job, "team-a")
    expected = [
        build_config_map(submitted),
        build_network_policy(submitted, NetworkPolicySettings()),
        build_raycluster(submitted),
        build_rayjob(submitted, 1),
        build_deployment(submitted, default_adapter(submitted)),
        build_service(submitted),
    ]
    docs = rendered(EXAMPLES / example, "-n", "team-a")
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(docs, key=key) == sorted(expected, key=key)


def test_the_rendered_rayjob_runs_the_rendered_config() -> None:
    # The entrypoint pins the config digest: render must print the ConfigMap that attempt 1 would really read.
    docs = {d["kind"]: d for d in rendered(EXAMPLES / "job.yaml", "-n", "elsewhere")}
    (text,) = docs["ConfigMap"]["data"].values()
    from mmrl_api.contract import config_digest

    assert config_digest(text) in docs["RayJob"]["spec"]["entrypoint"]
    assert '"namespace": "elsewhere"' in text


def test_a_job_without_serving_renders_no_deployment_or_service(tmp_path: Path) -> None:
    manifest = yaml.safe_load((EXAMPLES / "job.yaml").read_text())
    manifest["spec"]["inference"] = {"enabled": False}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    kinds = {d["kind"] for d in rendered(path)}
    assert "RayJob" in kinds and not kinds & {"Deployment", "Service"}


def test_an_invalid_job_prints_the_field_and_no_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = yaml.safe_load((EXAMPLES / "job.yaml").read_text())
    manifest["spec"]["lora"]["rank"] = 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["render", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "spec.lora.rank" in err


def test_the_cli_renders_into_the_namespace_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EXAMPLES / "local.yaml"), "-n", "team-b"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {d["metadata"]["namespace"] for d in docs} == {"team-b"}


def test_a_suspended_job_renders_what_it_creates_once_resumed(tmp_path: Path) -> None:
    manifest = yaml.safe_load((EXAMPLES / "local.yaml").read_text())
    manifest["spec"]["suspend"] = True
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    out, err = io.StringIO(), io.StringIO()
    assert render_file(str(path), None, out, err) == 0
    assert {d["kind"] for d in yaml.safe_load_all(out.getvalue())} == {kind for _, kind in EVERY_CHILD}
    assert "spec.suspend" in err.getvalue()
