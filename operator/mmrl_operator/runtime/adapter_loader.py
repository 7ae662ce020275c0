"""Make one replica of a ModelServer hold exactly the server's adapters, through vLLM's runtime LoRA API reached by
the apiserver's pod proxy (each replica by name: through the Service a request would reach any one of them).

What the replica holds is read from its `/v1/models` each time, never remembered: a replica that restarted lists
nothing and gets everything again, and one that another writer changed is set back. Unloads come first (they free
room), then loads; an adapter the replica already holds under the name from another path is loaded in place
(`load_inplace`), so requests naming it never meet a moment without it. Each call is bounded (the server is a
tenant's): five seconds to list, two minutes to load.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from mmrl_operator.core.builders.inference import PORT
from mmrl_operator.core.shared_serving import listed_adapters, replica_plan
from mmrl_operator.runtime.kube import Kube
from mmrl_operator.runtime.service_proxy import describe_error

log = logging.getLogger("mmrl.adapters")
LIST_SECONDS, LOAD_SECONDS = 5.0, 120.0


@dataclass
class ReplicaResult:
    holds: set[str] = field(default_factory=set)  # adapter names the replica holds at the right path
    errors: dict[str, str] = field(default_factory=dict)  # adapter name -> why it could not be loaded
    unreachable: str | None = None  # the replica did not answer its listing
    changed: int = 0  # loads and unloads made


def sync_replica(kube: Kube, namespace: str, pod: str, base: str, want: dict[str, str]) -> ReplicaResult:
    """Make the replica hold exactly `want` ({LoRA name: path}: the adapters and the aliases)."""
    result = ReplicaResult()
    try:
        answer = json.loads(kube.pod_call(namespace, pod, PORT, "GET", "/v1/models", deadline=LIST_SECONDS))
    except Exception as err:  # a replica starting or stopping: the next pass asks again
        result.unreachable = describe_error(err)
        return result
    listed = listed_adapters(answer.get("data") if isinstance(answer, dict) else None, base)
    load, unload = replica_plan(want, listed)
    for name in unload:
        try:
            kube.pod_call(namespace, pod, PORT, "POST", "/v1/unload_lora_adapter", {"lora_name": name}, LIST_SECONDS)
            result.changed += 1
            log.info("unloaded adapter %s from %s/%s", name, namespace, pod)
        except Exception as err:
            log.warning("could not unload adapter %s from %s/%s: %s", name, namespace, pod, describe_error(err))
    for name, path in load:
        body = {"lora_name": name, "lora_path": path, "load_inplace": name in listed}
        try:
            kube.pod_call(namespace, pod, PORT, "POST", "/v1/load_lora_adapter", body, LOAD_SECONDS)
            result.changed += 1
            log.info("loaded adapter %s from %s into %s/%s", name, path, namespace, pod)
        except Exception as err:
            result.errors[name] = describe_error(err)
            log.warning("could not load adapter %s into %s/%s: %s", name, namespace, pod, result.errors[name])
    result.holds = {name for name in want if name not in result.errors}
    return result
