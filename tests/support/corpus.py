"""The malformed-job corpus (tests/bad_specs.yaml) and the valid base it patches, for unit and cluster tests."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class BadCase:
    case: str
    expect: str
    patch: dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def example(name: str = "job.yaml") -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


def bad_cases() -> list[BadCase]:
    raw = yaml.safe_load((ROOT / "tests" / "bad_specs.yaml").read_text())
    return [BadCase(**c) for c in raw]


def bad_manifest(case: BadCase, base: dict[str, Any] | None = None) -> dict[str, Any]:
    return merge_patch(base if base is not None else example(), case.patch)
