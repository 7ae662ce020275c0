"""One ModelServer replica as its server's pass sees it: what it must hold (`Wanted`, one per LoRA name), what it
holds (its gateway's listing), what to load and unload to get there, whether it can be asked at all, and its
readiness gate. Pure; `runtime.adapter_loader` carries the plan out through the replica's gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmrl_api.gateway_contract import Listing
from mmrl_api.model_server import ModelServerStatus
from mmrl_operator.core.builders.gateway import GATEWAY
from mmrl_operator.core.builders.model_server import ADAPTERS_LOADED


@dataclass(frozen=True)
class Wanted:
    """One LoRA name a replica must hold: the adapter directory its copy is staged from, and the copy's digest."""

    path: str
    digest: str
    base_model: str = ""


def replica_holds(listing: Listing) -> dict[str, str]:
    """{name: digest} of what a replica serves: loaded by its gateway and held by its vLLM from that copy."""
    return {name: held.digest for name, held in listing.adapters.items() if held.loaded}


def replica_plan(want: dict[str, Wanted], listing: Listing) -> tuple[list[tuple[str, Wanted, bool]], list[str]]:
    """(names to load as (name, what, in place), names to unload) for one replica: what it lacks or holds from other
    files (an alias that moved: loaded in place, since vLLM holds the name), and what it holds that the server does
    not (its gateway's names, and any other vLLM lists)."""
    holds, in_vllm = replica_holds(listing), set(listing.vllm or {})
    load = [(name, w, name in in_vllm) for name, w in want.items() if holds.get(name) != w.digest]
    unload = sorted(name for name in set(listing.adapters) | in_vllm if name not in want)
    return load, unload


def vllm_up(pod: dict[str, Any]) -> bool:
    """Whether the replica can be listed and loaded into, whatever its readiness says: its vLLM answers (its
    container passed its readiness probe) and its gateway runs (it may be not ready while it loads adapters again)."""
    statuses = {cs.get("name"): cs for cs in (pod.get("status") or {}).get("containerStatuses") or []}
    vllm, gateway = statuses.get("vllm") or {}, statuses.get(GATEWAY) or {}
    return vllm.get("ready") is True and "running" in (gateway.get("state") or {})


def announced_names(status: ModelServerStatus | None, wanted: set[str] | dict[str, Wanted]) -> set[str]:
    """The names the server already serves and still wants: loaded on some replica at the last pass, and wanted by
    this one. A replica is Ready only while it holds all of them. A name being loaded for the first time is not
    among them, so one adapter that fails to load never takes a replica out of the Service; nor is a name the server
    no longer wants (its job deleted, its gate raised, its servedModelName edited), so unloading it never does."""
    if status is None:
        return set()
    served = {e.name for e in status.adapters if e.loaded_on} | {a.name for a in status.aliases if a.loaded_on}
    return served & set(wanted)


def gate_condition(holds: set[str] | None, announced: set[str], now: str) -> dict[str, Any]:
    """The replica's readiness-gate condition: True once it answers and holds every announced name. `holds` None:
    its vLLM is not up, or did not answer its listing."""
    if holds is None:
        ok, reason, message = False, "VLLMNotUp", "vLLM does not answer yet; its adapters are loaded once it does"
    elif missing := sorted(announced - holds):
        ok, reason, message = False, "AdaptersLoading", f"loading {', '.join(missing)}"
    else:
        ok, reason, message = True, "AdaptersLoaded", f"holds every adapter the server serves ({len(holds)})"
    return {
        "type": ADAPTERS_LOADED,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


def fronted(pod: dict[str, Any]) -> bool:
    """Whether the replica runs the gateway: a pod of a Deployment written before the gateway does not, and is left
    as it is (gate and adapters) until the roll-out replaces it, so an operator upgrade takes no replica out of the
    Service before its successor is in."""
    return any(k.get("name") == GATEWAY for k in (pod.get("spec") or {}).get("containers") or [])
