"""Typed reads of JSON that other processes wrote (KubeRay's status, a Deployment's, a pod's): a value of an
unexpected type reads as absent, so a reader answers "not ready" or "unknown" instead of raising."""

from __future__ import annotations

from typing import Any


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def dig(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]... through mappings only; None as soon as a step is not a mapping or lacks the key."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def records(value: Any) -> list[dict[str, Any]]:
    """The mappings of a list (conditions, container statuses, worker groups); anything else is dropped."""
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def integer(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""
