"""Raw HTTP to the apiserver (`api_request`, for what the generated client models only slow down: watches), and to a
Service through the apiserver's service proxy: reaches in-cluster endpoints from anywhere the Kubernetes API is
reachable, with the caller's own credentials (RBAC: `get`/`create` on `services/proxy`). What a Service answers is
read under a deadline and a size cap (`bounded_http`): the server behind it is a tenant's, not ours."""

from __future__ import annotations

import json
from typing import Any

from mmrl_operator.runtime import bounded_http


def api_request(
    api_client: Any,
    method: str,
    path: str,
    query: dict[str, Any] | None = None,
    body: dict[str, Any] | None = None,
    timeout: float | tuple[float, float] = 5.0,
    content_type: str = "application/json",
) -> Any:
    """`method` on an apiserver path with the client's credentials, bypassing the generated models. Returns the
    response unread (a caller may stream it, e.g. a watch); raises ApiException on a non-2xx answer."""
    from kubernetes.client.exceptions import ApiException

    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    params = [(k, v) for k, v in (query or {}).items() if v is not None]
    _method, url, header_params, serialized, post_params = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=params or None,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(_method, url, header_params, serialized, post_params, _request_timeout=timeout)
    if not 200 <= response.status < 300:
        response.read()
        raise ApiException(http_resp=response)
    return response


def proxy_json(
    api_client: Any,
    method: str,
    namespace: str,
    service: str,
    port: int | str,
    path: str,
    body: dict[str, Any] | None = None,
    deadline: float = 5.0,
) -> Any:
    """`method` `path` on `service`:`port`; returns the decoded JSON body. Raises on a non-2xx answer, on one larger
    than `bounded_http.MAX_BODY` and when the whole exchange takes longer than `deadline` seconds."""
    resource = f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path.lstrip('/')}"
    return json.loads(bounded_http.request(api_client, method, resource, body=body, deadline=deadline))


def describe_error(exc: Exception) -> str:
    """One short line for a failed proxy call: the apiserver's status message, not the whole response."""
    status, body = getattr(exc, "status", None), getattr(exc, "body", None)
    if status is None:
        return " ".join(str(exc).split())[:300]
    try:
        message = json.loads(body).get("message") if body else None
    except (TypeError, ValueError):
        message = None
    return f"HTTP {status}: {' '.join(str(message or getattr(exc, 'reason', '') or body).split())[:300]}"
