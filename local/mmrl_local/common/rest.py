"""Raw JSON requests through a ``kubernetes.client.ApiClient`` (its TLS, auth and host), for what the typed
client does not model well: server-side apply, JSON merge patches of custom resources' status, and lists
read as plain dicts.
"""

from __future__ import annotations

import json

from kubernetes import client
from kubernetes.client.rest import ApiException

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    body: dict | None = None,
    query: list[tuple[str, str]] | None = None,
    content_type: str | None = None,
) -> dict:
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    params = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=query or [],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(*params)
    data = resp.read()
    if not 200 <= resp.status < 300:
        raise ApiException(status=resp.status, reason=resp.reason, body=data.decode(errors="replace"))
    return json.loads(data) if data else {}


def items(api: client.ApiClient, path: str, label_selector: str | None = None) -> list[dict]:
    query = [("labelSelector", label_selector)] if label_selector else []
    return request(api, "GET", path, query=query).get("items") or []
