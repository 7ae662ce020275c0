"""The demo (local/mmrl_local/demo.py) on a test's control plane, namespace and tmp_path: what tests/e2e and the
cluster tests of the demo's pieces drive."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmrl_local.demo import Demo
from mmrl_local.toolchain import build


def say_flushed(line: str) -> None:
    print(line, flush=True)


def make_demo(
    control_plane, api_client, namespace: str, tmp_path: Path, say: Callable[[str], None] = say_flushed, **kwargs: Any
) -> Demo:
    return Demo(
        api_client,
        build.build(verbose=False)["kubectl"],
        control_plane.kubeconfig,
        namespace=namespace,
        volume_dir=tmp_path / "fsx",
        out_dir=tmp_path / "out",
        say=say,
        **kwargs,
    )
