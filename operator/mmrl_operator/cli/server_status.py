"""`mmrl status NAME --server`: a ModelServer's phase, replicas, the adapters it holds, its aliases with their
history, the jobs it refuses, and its recent events, for humans."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from mmrl_api import constants as c
from mmrl_operator.cli.cluster import connect
from mmrl_operator.cli.kubeconfig import ClusterOptions
from mmrl_operator.cli.output import formatted


def _reward(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def render_server_status(server: dict[str, Any], events: list[dict[str, Any]]) -> str:
    meta, st = server["metadata"], server.get("status") or {}
    lines = [
        f"{meta['namespace']}/{meta['name']}  phase={st.get('phase', 'Pending')}  "
        f"replicas={st.get('readyReplicas', 0)}/{st.get('replicas', '?')} ready",
        f"  message: {st.get('message') or '-'}",
        f"  serves: {st.get('model') or '-'} at {st.get('url') or '-'}",
        "  adapters:",
    ]
    for a in st.get("adapters") or []:
        on = ", ".join(a.get("loadedOn") or []) or "no replica yet"
        lines.append(
            f"    {a['name']:<24} job {a['job']:<20} held-out {_reward(a.get('heldOutReward')):<6} since "
            f"{a.get('since') or '-'}  loaded on {on}"
        )
    for alias in st.get("aliases") or []:
        pinned = " (pinned)" if alias.get("pinned") else ""
        lines.append(f"  alias {alias['name']} -> {alias['adapter']} (job {alias['job']}){pinned}")
        if alias.get("error"):
            lines.append(f"    warning: {alias['error']}")
        for h in alias.get("history") or []:
            lines.append(
                f"    {h.get('since') or '-'} .. {h.get('until') or 'now':<20} {h['job']:<20} "
                f"held-out {_reward(h.get('heldOutReward'))}"
            )
    for r in st.get("refused") or []:
        lines.append(f"  refused: job {r['job']} ({r['reason']}): {r.get('message') or ''}".rstrip())
    lines.append("  conditions:")
    for cond in st.get("conditions") or []:
        reason = cond.get("reason", "")
        lines.append(f"    {cond['type']:<13} {cond['status']:<7} {reason:<24} {cond.get('message', '')}".rstrip())
    lines.append("  events:")
    for e in events[-10:]:
        lines.append(f"    {e.get('type', ''):<8} {e.get('reason', ''):<22} {e.get('message', '')}")
    return "\n".join(lines)


def show_server_status(name: str, opts: ClusterOptions, output: str | None = None, out: TextIO | None = None) -> int:
    """Print the ModelServer for humans (with its recent events), or as the apiserver returns it (`output`)."""
    from kubernetes import client

    from mmrl_operator.cli.status import recent_events

    api, namespace = connect(opts)
    server = client.CustomObjectsApi(api).get_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.SERVER_PLURAL, name
    )
    if output:
        text = formatted(server, output)
    else:
        text = render_server_status(server, recent_events(api, namespace, name, c.SERVER_KIND)) + "\n"
    (out or sys.stdout).write(text)
    return 0
