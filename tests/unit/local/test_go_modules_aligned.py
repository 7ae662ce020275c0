"""The control plane's and Kueue's wrapper modules select the same version of every module they share, so Kueue's
build, which runs after the control plane's, finds nearly all of its compiled packages in the Go build cache
(docs/benchmarks.md: Kueue cold, right after the control plane, 116 s -> 43 s). A `go get` in one of them that
moves a shared module must move it in the other too (`go get <module>@<version>` there)."""

from __future__ import annotations

import re
from pathlib import Path

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


def test_the_control_plane_and_kueue_select_the_same_shared_modules() -> None:
    kube, kueue = selected(build.GO_DIR / "kube" / "go.mod"), selected(build.GO_DIR / "kueue" / "go.mod")
    shared = (kube.keys() & kueue.keys()) - KEPT_APART
    assert len(shared) > 100, sorted(shared)  # client-go, apiserver, grpc, otel, ...: what makes sharing worth it
    apart = {path: (kube[path], kueue[path]) for path in sorted(shared) if kube[path] != kueue[path]}
    assert apart == {}, "go/kube and go/kueue select different versions (kube, kueue)"


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
