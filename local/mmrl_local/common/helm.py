"""helm with its cache, config and data homes of its own (never the user's): the chart's tests and the operator's
release in `make demo` run it the same way."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from mmrl_local.common import yaml_loader
from mmrl_operator.codegen.chart import CHART_DIR as CHART


class HelmError(RuntimeError):
    """helm exited non-zero; the message carries its stderr."""


class Helm:
    """helm with its cache, config and data homes under `home` (never the user's), against `kubeconfig`."""

    def __init__(self, binary: Path, home: Path, kubeconfig: Path | None = None) -> None:
        self.binary, self.home, self.kubeconfig = binary, home, kubeconfig

    def env(self) -> dict[str, str]:
        env = {f"HELM_{kind}_HOME": str(self.home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}
        env["PATH"] = "/usr/bin:/bin"
        env["HOME"] = str(self.home)
        if self.kubeconfig:
            env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def run(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.binary), *map(str, args)], env=self.env(), capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise HelmError(f"helm {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def values_file(self, values: dict[str, Any]) -> Path:
        path = self.home / f"values-{abs(hash(yaml.safe_dump(values)))}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(values))
        return path

    def template(
        self, release: str, namespace: str, values: dict[str, Any] | None = None, chart: Path = CHART
    ) -> list[dict[str, Any]]:
        out = self.run("template", release, chart, "-n", namespace, "-f", self.values_file(values or {})).stdout
        return yaml_loader.load_docs(out)
