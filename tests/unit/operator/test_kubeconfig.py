"""Which kubeconfig, context and namespace `mmrl` uses, by kubectl's rules, read without a cluster."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from mmrl_operator.cli.kubeconfig import ClusterOptions, KubeconfigError, offline_namespace, read_kubeconfig


def write(path: Path, current: str | None, **contexts: str) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "contexts": [{"name": n, "context": {"namespace": ns}} for n, ns in contexts.items()],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_files_of_kubeconfig_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    first = write(tmp_path / "a", None, shared="from-a")
    second = write(tmp_path / "b", "shared", shared="from-b", other="other-ns")
    third = write(tmp_path / "c", "other")
    env = {"KUBECONFIG": os.pathsep.join(map(str, [first, tmp_path / "missing", second, third]))}
    merged = read_kubeconfig(None, env)
    assert merged.files == [first, second, third]
    assert merged.current_context == "shared"  # the first file that sets it
    assert merged.context(None) == ("shared", {"namespace": "from-a"})  # the first file that defines it
    assert offline_namespace(ClusterOptions(context="other"), env) == "other-ns"


def test_kubeconfig_option_wins_and_home_is_the_last_resort(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    write(tmp_path / ".kube" / "config", "home", home="home-ns")
    given = write(tmp_path / "given", "given", given="given-ns")
    env = {"HOME": str(tmp_path)}
    assert offline_namespace(ClusterOptions(), env) == "home-ns"
    assert offline_namespace(ClusterOptions(kubeconfig=str(given)), {**env, "KUBECONFIG": "/nowhere"}) == "given-ns"
    assert offline_namespace(ClusterOptions(namespace="mine", kubeconfig=str(given)), env) == "mine"


def test_without_a_kubeconfig_the_namespace_is_default_unless_one_was_asked_for(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    assert offline_namespace(ClusterOptions(), env) == "default"
    with pytest.raises(KubeconfigError, match=re.escape(f"no kubeconfig: {tmp_path}/.kube/config does not exist")):
        read_kubeconfig(None, env)
    with pytest.raises(KubeconfigError, match=re.escape(f"--kubeconfig {tmp_path}/nope: no such file")):
        offline_namespace(ClusterOptions(kubeconfig=str(tmp_path / "nope")), env)


def test_a_file_that_is_no_kubeconfig_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "config"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(KubeconfigError, match=re.escape(f"{bad}: not a kubeconfig")):
        read_kubeconfig(str(bad), {})
    bad.write_text("clusters: [unclosed\n")
    with pytest.raises(KubeconfigError, match=re.escape(f"{bad}: cannot read the kubeconfig: ")):
        read_kubeconfig(str(bad), {})
