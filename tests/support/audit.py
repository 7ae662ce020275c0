"""Read the local apiserver's audit log (``mmrl_local.cluster.controlplane.AUDIT_POLICY``): every resource request one
user made, with its URI and the answer it got."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str  # plural, with "/subresource"
    namespace: str | None
    name: str | None
    code: int
    authorized: bool = False  # the authorizer allowed it (a 403 after that came from admission, not from RBAC)
    uri: str = ""  # the request's path and query, e.g. a watch's resourceVersion and timeoutSeconds

    @property
    def query(self) -> dict[str, str]:
        """The query parameters (each given once)."""
        return dict(parse_qsl(urlsplit(self.uri).query))

    @property
    def permission(self) -> tuple[str, str, str]:
        return (self.group, self.resource, self.verb)


def requests_by(log: Path, username: str) -> list[Request]:
    """Resource requests of `username` that got an answer (a watch counts once, when its response started)."""
    found: list[Request] = []
    seen: set[str] = set()
    for line in log.read_text().splitlines() if log.exists() else []:
        event = json.loads(line)
        ref = event.get("objectRef")
        if event["user"]["username"] != username or ref is None or event["auditID"] in seen:
            continue
        seen.add(event["auditID"])
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        found.append(
            Request(
                verb=event["verb"],
                group=ref.get("apiGroup", ""),
                resource=resource,
                namespace=ref.get("namespace"),
                name=ref.get("name"),
                code=(event.get("responseStatus") or {}).get("code", 0),
                authorized=(event.get("annotations") or {}).get("authorization.k8s.io/decision") == "allow",
                uri=event.get("requestURI", ""),
            )
        )
    return found
