"""Install KubeRay's CRDs (read from the pinned Go module) with server-side apply: at ~1 MB each they
exceed the last-applied annotation limit of client-side apply. Then wait until they are Established.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from kubernetes import client

from mmrl_local.common import rest, yaml_loader

FIELD_MANAGER = "mmrl-local"


def apply_crd(api: client.ApiClient, crd: dict) -> None:
    name = crd["metadata"]["name"]
    rest.request(
        api,
        "PATCH",
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
        body=crd,
        query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
        content_type=rest.APPLY,
    )


def wait_established(api: client.ApiClient, names: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in list(pending):
            # Raw JSON: deserializing a 1 MB CRD into the typed client's models costs seconds per read.
            crd = rest.request(api, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not Established after {timeout}s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)


def load_module_docs(path: Path, cache_dir: Path | None) -> list[dict]:
    """The YAML documents of ``path``, a file of the (immutable) Go module cache: parsed once and kept as JSON in
    ``cache_dir``, since parsing 3 MB of YAML costs ~3 s even with libyaml. Fresh objects each call."""
    cached = None
    if cache_dir is not None:
        cached = cache_dir / (hashlib.sha256(str(path).encode()).hexdigest()[:16] + ".json")
        if cached.exists():
            return json.loads(cached.read_text())
    docs = yaml_loader.load_docs(path.read_text())
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")  # parallel test workers may all write it at once
        tmp.write_text(json.dumps(docs))
        tmp.replace(cached)
    return docs


def install(api: client.ApiClient, paths: list[Path], cache_dir: Path | None = None) -> list[str]:
    names = []
    for path in paths:
        for doc in load_module_docs(path, cache_dir):
            if doc.get("kind") == "CustomResourceDefinition":
                apply_crd(api, doc)
                names.append(doc["metadata"]["name"])
    wait_established(api, names)
    return names
