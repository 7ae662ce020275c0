"""The malformed-job corpus (tests/bad_specs.yaml), the edge-of-valid corpus (tests/good_specs.yaml) and the
valid base both patch, for unit and cluster tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmrl_operator.core.jsonmerge import merge_patch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class BadCase:
    case: str
    expect: str
    patch: dict[str, Any]
    kueue: bool = False
    """Kueue's own RayCluster webhook refuses the RayCluster such a job would produce (test_kueue_webhook.py)."""
    refused_by: str = "apiserver"
    """Who refuses it at apply time: the apiserver (schema and CEL), or, for what no CEL rule can compute (the GPU
    memory plan), the operator, before it creates any child; `mmrl validate` refuses both."""

    @property
    def by_apiserver(self) -> bool:
        return self.refused_by == "apiserver"


def example(name: str = "job.yaml") -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


def job_examples() -> list[str]:
    """The examples that are MultimodalRLJobs (examples/ also holds a ModelServer), by file name."""
    return [p.name for p in sorted(EXAMPLES.glob("*.yaml")) if example(p.name).get("kind") == "MultimodalRLJob"]


def bad_cases() -> list[BadCase]:
    raw = yaml.safe_load((ROOT / "tests" / "bad_specs.yaml").read_text())
    return [BadCase(**c) for c in raw]


@dataclass(frozen=True)
class GoodCase:
    case: str
    patch: dict[str, Any]


def good_cases() -> list[GoodCase]:
    raw = yaml.safe_load((ROOT / "tests" / "good_specs.yaml").read_text())
    return [GoodCase(**c) for c in raw]


def bad_manifest(case: BadCase | GoodCase, base: dict[str, Any] | None = None) -> dict[str, Any]:
    return merge_patch(base if base is not None else example(), case.patch)
