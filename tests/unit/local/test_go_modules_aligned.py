"""The wrapper modules of etcd, KubeRay and Kueue select the control plane's version of each module they share with it,
so what builds after the control plane (etcd in the same step, then KubeRay and Kueue) finds nearly all of its
compiled packages in the Go build cache. Measured cold on 2 cores, right after the control plane: Kueue 116 s -> 43 s;
KubeRay 174 -> 21 CPU-seconds, etcd 37 -> 14 (docs/benchmarks.md). A `go get` in one of them that moves a shared
module must move it in the others too (`go get <module>@<version>` there).

kwok stays apart: v0.8.0 requires the k8s.io 0.36 libraries, newer than kubernetes v1.35.4's; v0.7.0 does not compile
against 0.35 (an apimachinery constant it uses was removed), and v0.6.1 lacks the template functions our stages use
(NodeIPsWith, PodIPsWith).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mmrl_local.toolchain import build

# Kueue imports a few helpers of k8s.io/kubernetes at the version its own release was built with; raising them to the
# control plane's would change Kueue's behaviour, for the few packages concerned.
KEPT_APART = {"k8s.io/kubernetes"}
_LINE = re.compile(r"^\s*(?:require\s+|replace\s+)?(\S+)(?:\s+(v\S+))?(?:\s+=>\s+(\S+)\s+(v\S+))?")


def selected(go_mod: Path) -> dict[str, str]:
    """Module → version as the wrapper's go.mod requires it, a replacement's version taking precedence."""
    required: dict[str, str] = {}
    replaced: dict[str, str] = {}
    block = None
    for raw in go_mod.read_text().splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        if line in ("require (", "replace ("):
            block = line.split()[0]
            continue
        if line == ")":
            block = None
            continue
        kind = block or line.split()[0]
        if kind not in ("require", "replace"):
            continue
        m = _LINE.match(line)
        assert m, f"{go_mod}: cannot read {raw!r}"
        path, version, _, new_version = m.groups()
        if kind == "replace" and new_version:
            replaced[path] = new_version
        elif kind == "require" and version:
            required[path] = version
    return {path: replaced.get(path, version) for path, version in required.items()}


@pytest.mark.parametrize("wrapper", ["etcd", "kuberay", "kueue"])
def test_each_wrapper_selects_the_control_planes_version_of_every_module_it_shares(wrapper: str) -> None:
    kube, other = selected(build.GO_DIR / "kube" / "go.mod"), selected(build.GO_DIR / wrapper / "go.mod")
    shared = (kube.keys() & other.keys()) - KEPT_APART
    assert len(shared) > 40, sorted(shared)  # client-go, apimachinery, grpc, otel, ...: what makes sharing worth it
    apart = {path: (kube[path], other[path]) for path in sorted(shared) if kube[path] != other[path]}
    assert apart == {}, f"go/kube and go/{wrapper} select different versions (kube, {wrapper})"


def test_the_reader_takes_a_replacement_over_the_requirement(tmp_path: Path) -> None:
    go_mod = tmp_path / "go.mod"
    go_mod.write_text(
        "module x\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v1.35.4 // indirect\n\nrequire (\n"
        "\tk8s.io/api v0.0.0 // indirect\n\tgoogle.golang.org/grpc v1.79.3\n)\n\n"
        "replace (\n\tk8s.io/api => k8s.io/api v0.35.4\n)\n\nreplace example.com/a v1.0.0 => example.com/a v1.1.0\n"
    )
    assert selected(go_mod) == {
        "k8s.io/kubernetes": "v1.35.4",
        "k8s.io/api": "v0.35.4",
        "google.golang.org/grpc": "v1.79.3",
    }
