"""`mmrl rollback ALIAS --server S`: point a ModelServer alias back at the adapter it served before.

A rollback is a pin in the server's spec (`spec.aliasPins`), not a change of status: it is declarative, it survives
an operator restart, and under GitOps it is the same one-line change in git (a pin made here on a server that Argo CD
syncs is reverted by the next sync unless it is committed). The equivalent kubectl patch is printed. `--unpin`
removes the pin, and the alias follows promotions again.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from mmrl_api import constants as c
from mmrl_operator.cli.kubeconfig import ClusterOptions


def previous_target(status: dict[str, Any], alias: str) -> str:
    """The job the alias pointed at before its current one, from the server's alias history."""
    entry = next((a for a in status.get("aliases") or [] if a.get("name") == alias), None)
    if entry is None:
        raise LookupError(f"the server has no alias {alias}")
    earlier = [h["job"] for h in entry.get("history") or [] if h.get("job") != entry.get("job")]
    if not earlier:
        raise LookupError(f"alias {alias} has pointed only at {entry.get('job')}: there is nothing to roll back to")
    return str(earlier[-1])


def held(status: dict[str, Any], job: str) -> None:
    """Raise LookupError unless the server holds `job`'s adapter: a pin to a job it does not hold (deleted, refused,
    never promoted) would leave the alias where it is, and the command must not say it rolled back."""
    jobs = sorted({str(a.get("job")) for a in status.get("adapters") or [] if a.get("job")})
    if job not in jobs:
        holds = ", ".join(jobs) or "nothing"
        raise LookupError(f"the server does not hold job {job}'s adapter (it holds: {holds}); nothing was changed")


def pins_after(spec: dict[str, Any], alias: str, job: str | None) -> list[dict[str, str]]:
    """spec.aliasPins with `alias` pinned to `job` (None: unpinned), every other pin kept."""
    pins = [p for p in spec.get("aliasPins") or [] if p.get("alias") != alias]
    return pins + ([{"alias": alias, "job": job}] if job else [])


def main(alias: str, server: str, opts: ClusterOptions, to: str | None, unpin: bool) -> int:
    from kubernetes import client

    from mmrl_operator.cli.cluster import connect

    api_client, ns = connect(opts)
    custom = client.CustomObjectsApi(api_client)
    found = custom.get_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.SERVER_PLURAL, server)
    try:
        job = None if unpin else (to or previous_target(found.get("status") or {}, alias))
        if job is not None:
            held(found.get("status") or {}, job)
    except LookupError as err:
        print(f"mmrl rollback: {err}", file=sys.stderr)
        return 1
    patch = {"spec": {"aliasPins": pins_after(found.get("spec") or {}, alias, job)}}
    custom.patch_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.SERVER_PLURAL, server, patch)
    what = f"unpinned {alias}: it follows promotions again" if job is None else f"pinned {alias} to job {job}"
    print(f"{what} (kubectl patch modelserver {server} -n {ns} --type merge -p '{json.dumps(patch)}')")
    return 0
