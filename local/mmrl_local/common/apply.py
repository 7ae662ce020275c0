"""Server-side apply of plain manifests (dicts), as an admin or a GitOps tool would apply them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient


def apply_objects(
    api: client.ApiClient,
    objects: Iterable[dict[str, Any]],
    *,
    field_manager: str = "mmrl-local",
    dry_run: bool = False,
) -> None:
    """Apply each object (forcing conflicts); with ``dry_run`` the apiserver validates and admits but stores nothing."""
    dyn = DynamicClient(api)
    for obj in objects:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        extra = {"dry_run": "All"} if dry_run else {}
        res.server_side_apply(
            body=obj,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=field_manager,
            force_conflicts=True,
            **extra,
        )
