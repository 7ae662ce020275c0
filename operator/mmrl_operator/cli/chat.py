"""`mmrl chat NAME [--image FILE] "question"`: ask a job's served adapter one question, from anywhere kubectl works.

The request goes to the job's inference Service through the apiserver's service proxy (the caller needs
`get services/proxy` in the job's namespace, as `kubectl` users usually have), as an OpenAI chat completion with
`model` set to the adapter's served name from `status.inference.model` and the image as a data URI.
"""

from __future__ import annotations

import base64
import mimetypes
import sys
from pathlib import Path
from typing import Any

from mmrl_api import constants as c
from mmrl_operator.cli.kubeconfig import ClusterOptions
from mmrl_operator.runtime.bounded_http import ResponseTooLarge
from mmrl_operator.runtime.service_proxy import proxy_json

CHAT_DEADLINE = 120.0  # seconds for the whole answer: a cold adapter on a busy server can take a while


def image_part(path: Path) -> dict[str, Any]:
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    data = base64.b64encode(path.read_bytes()).decode()
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def chat_request(model: str, question: str, image: Path | None, max_tokens: int = 64) -> dict[str, Any]:
    content: list[dict[str, Any]] = [image_part(image)] if image else []
    content.append({"type": "text", "text": question})
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


def ask(api_client, namespace: str, name: str, question: str, image: Path | None = None) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    """(answer, job status.inference); raises RuntimeError when the job does not serve yet."""
    from kubernetes import client

    job = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name
    )
    inference = (job.get("status") or {}).get("inference") or {}
    if not inference.get("service") or not inference.get("model"):
        phase = (job.get("status") or {}).get("phase", "Pending")
        raise RuntimeError(f"{namespace}/{name} is not serving (phase {phase})")
    port = inference["url"].rsplit(":", 1)[-1].split("/", 1)[0]
    body = chat_request(inference["model"], question, image)
    answer = proxy_json(
        api_client, "POST", namespace, inference["service"], port, "/v1/chat/completions", body, deadline=CHAT_DEADLINE
    )
    return answer["choices"][0]["message"]["content"], inference


def ask_server(  # type: ignore[no-untyped-def]
    api_client, namespace: str, server: str, model: str, question: str, image: Path | None = None
) -> tuple[str, dict]:
    """(answer, what was asked) from a ModelServer, for `model`: an adapter's served name, an alias or the base
    model; raises RuntimeError when the server is not serving."""
    from kubernetes import client

    found = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.SERVER_PLURAL, server
    )
    status = found.get("status") or {}
    if not status.get("service") or not status.get("url"):
        raise RuntimeError(f"ModelServer {namespace}/{server} is not serving (phase {status.get('phase', 'Pending')})")
    port = status["url"].rsplit(":", 1)[-1].split("/", 1)[0]
    body = chat_request(model, question, image)
    answer = proxy_json(
        api_client, "POST", namespace, status["service"], port, "/v1/chat/completions", body, deadline=CHAT_DEADLINE
    )
    return answer["choices"][0]["message"]["content"], {"model": model, "service": status["service"]}


def main(name: str, question: str, image: str | None, opts: ClusterOptions, server: str | None = None) -> int:
    from mmrl_operator.cli.cluster import connect

    api_client, ns = connect(opts)
    picture = Path(image) if image else None
    try:
        if server:
            answer, inference = ask_server(api_client, ns, server, name, question, picture)
        else:
            answer, inference = ask(api_client, ns, name, question, picture)
    except (RuntimeError, OSError, ResponseTooLarge) as exc:
        print(f"mmrl chat: {exc}", file=sys.stderr)
        return 1
    print(f"[{inference['model']} via {inference['service']}] {answer.strip()}")
    return 0
