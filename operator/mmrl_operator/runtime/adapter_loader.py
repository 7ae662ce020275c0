"""Make one replica of a ModelServer hold exactly the server's adapters, through its gateway's admin API (with the
server's admin key) reached by the apiserver's pod proxy (each replica by name: through the Service a request would
reach any one of them). The gateway stages each adapter's files into a checked copy and has vLLM load the copy; no
one else reaches vLLM's runtime LoRA API.

What the replica holds is read from its gateway's listing each time, never remembered: a replica that restarted lists
nothing and gets everything again, and one that changed is set back. Unloads come first (they free room), then
loads; a name vLLM already holds from other files is loaded in place (`inplace`), so requests naming it never meet a
moment without it. Each call is bounded (the replica runs a tenant's vLLM): five seconds to list and unload, ten
minutes to stage and load (the gateway copies the adapter first).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from mmrl_api.gateway_contract import ADAPTERS, ADMIN_KEY_HEADER, LOAD, PORT, UNLOAD, Listing, LoadRequest
from mmrl_operator.core.server_replicas import Wanted, replica_holds, replica_plan
from mmrl_operator.runtime.kube import Kube
from mmrl_operator.runtime.service_proxy import describe_error

log = logging.getLogger("mmrl.adapters")
LIST_SECONDS, LOAD_SECONDS = 5.0, 600.0


@dataclass
class ReplicaResult:
    holds: set[str] = field(default_factory=set)  # adapter names the replica holds from the right files
    serves: dict[str, str] = field(default_factory=dict)  # every name it answers for -> the digest it holds it at
    errors: dict[str, str] = field(default_factory=dict)  # adapter name -> why it could not be loaded
    unreachable: str | None = None  # the replica's gateway did not answer its listing
    changed: int = 0  # loads and unloads made


def sync_replica(kube: Kube, namespace: str, pod: str, key: str, want: dict[str, Wanted]) -> ReplicaResult:
    """Make the replica hold exactly `want` (the adapters and the aliases); `key`: the server's admin key."""
    result = ReplicaResult()
    headers = {ADMIN_KEY_HEADER: key}

    def call(method: str, path: str, body: dict | None, seconds: float) -> bytes:
        return kube.pod_call(namespace, pod, PORT, method, path, body, seconds, headers=headers)

    try:
        listing = Listing.model_validate(json.loads(call("GET", ADAPTERS, None, LIST_SECONDS)))
    except Exception as err:  # a replica starting or stopping, or a key the gateway does not have yet
        result.unreachable = describe_error(err)
        return result
    load, unload = replica_plan(want, listing)
    result.serves = replica_holds(listing)
    for name in unload:
        try:
            call("POST", UNLOAD, {"name": name}, LIST_SECONDS)
            result.changed += 1
            result.serves.pop(name, None)
            log.info("unloaded adapter %s from %s/%s", name, namespace, pod)
        except Exception as err:
            log.warning("could not unload adapter %s from %s/%s: %s", name, namespace, pod, describe_error(err))
    for name, wanted, inplace in load:
        ask = LoadRequest(
            name=name,
            source=wanted.path,
            digest=wanted.digest,
            inplace=inplace,
            base_model=wanted.base_model or None,
        )
        try:
            call("POST", LOAD, ask.model_dump(by_alias=True, exclude_none=True), LOAD_SECONDS)
            result.changed += 1
            result.serves[name] = wanted.digest
            log.info(
                "loaded adapter %s from %s (digest %s) into %s/%s", name, wanted.path, wanted.digest, namespace, pod
            )
        except Exception as err:
            result.errors[name] = describe_error(err)
            log.warning("could not load adapter %s into %s/%s: %s", name, namespace, pod, result.errors[name])
    result.holds = {name for name in want if name not in result.errors}  # held already, or loaded just now
    # A failed in-place load (an alias that was to move) leaves the name at its old files: still answered.
    result.serves = {name: digest for name, digest in result.serves.items() if name in want}
    return result
