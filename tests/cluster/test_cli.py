"""`mmrl status` against the real apiserver, run as a user types it: the context and namespace it is given, the object
as data with `-o json|yaml`, and the apiserver's refusals (NotFound, Forbidden) as one line, the way kubectl prints
them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.chart import token_kubeconfig
from tests.support.cli import mmrl
from tests.support.jobspecs import cluster_job

pytestmark = pytest.mark.cluster


def with_team_context(admin: Path, namespace: str, path: Path) -> Path:
    """The admin kubeconfig plus a context `team` in `namespace`; the current context stays the admin's (no
    namespace: `default`)."""
    doc = yaml.safe_load(admin.read_text())
    (context,) = doc["contexts"]
    doc["contexts"].append({"name": "team", "context": {**context["context"], "namespace": namespace}})
    path.write_text(yaml.safe_dump(doc))
    return path


def test_status_prints_the_job_of_the_context_asked_for_as_json_yaml_or_for_people(jobs, control_plane, tmp_path):
    jobs.create(cluster_job("geo"))
    jobs.patch_status("geo", {"phase": "Running", "progress": {"step": 3, "totalSteps": 40}})
    config = str(with_team_context(control_plane.kubeconfig, jobs.ns, tmp_path / "kubeconfig"))
    stored = jobs.get("geo")

    as_json = mmrl("status", "geo", "--kubeconfig", config, "--context", "team", "-o", "json", home=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == stored
    as_yaml = mmrl("status", "geo", "--kubeconfig", config, "-n", jobs.ns, "-o", "yaml", home=tmp_path)
    assert as_yaml.returncode == 0, as_yaml.stderr
    assert yaml.safe_load(as_yaml.stdout) == stored
    for_people = mmrl("status", "geo", "--kubeconfig", config, "--context", "team", home=tmp_path)
    assert for_people.returncode == 0, for_people.stderr
    assert for_people.stdout.startswith(f"{jobs.ns}/geo  phase=Running  attempt=0\n")
    assert "progress: step 3/40" in for_people.stdout


def test_a_job_not_in_the_contexts_namespace_is_kubectls_one_line_not_found(jobs, control_plane, tmp_path):
    jobs.create(cluster_job("geo"))
    config = str(with_team_context(control_plane.kubeconfig, jobs.ns, tmp_path / "kubeconfig"))
    done = mmrl("status", "geo", "--kubeconfig", config, home=tmp_path)  # the current context: namespace default
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == 'Error from server (NotFound): multimodalrljobs.mmrl.dev "geo" not found\n'


def test_a_permission_the_apiserver_refuses_is_one_line_forbidden(jobs, api_client, tmp_path):
    jobs.create(cluster_job("geo"))
    # The namespace's default ServiceAccount: authenticated, and granted nothing on jobs.
    config = str(token_kubeconfig(api_client, jobs.ns, "default", tmp_path / "kubeconfig"))
    done = mmrl("status", "geo", "--kubeconfig", config, "-n", jobs.ns, home=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        f'Error from server (Forbidden): multimodalrljobs.mmrl.dev "geo" is forbidden: User '
        f'"system:serviceaccount:{jobs.ns}:default" cannot get resource "multimodalrljobs"'
    )
    assert done.stderr.count("\n") == 1
