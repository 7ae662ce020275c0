"""The contract between the operator and a shared server's gateway (`mmrl_operator.gateway`), which both sides import:
where each part of a replica listens and mounts, the paths clients may ask, the admin API's paths, header and
messages.

A ModelServer's replica runs vLLM on loopback only and the gateway, from the operator's image, on the server's port
in front of it. Clients reach the allow-listed inference paths; only a caller with the server's admin key (the
operator, through the apiserver's pod proxy) reaches the admin API, which stages an adapter's files into a
content-addressed copy no trainer can write, checks them, and has vLLM load that copy.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mmrl_api.constants import ADAPTER_MOUNT, CONFIG_MOUNT

OPERATOR_IMAGE_ENV = "MMRL_OPERATOR_IMAGE"  # the operator's own image, which the gateway runs from (the chart sets it)
# When the operator is not told its image (a developer's `mmrl operator`): the chart's default image.
DEFAULT_OPERATOR_IMAGE = "ghcr.io/mmrl-dev/mmrl-operator:0.1.0"

PORT = 8000  # the gateway: the Service's, the probes' and the pod proxy's target
VLLM_PORT = 8001  # vLLM, on 127.0.0.1 only
STORE = ADAPTER_MOUNT  # the staged copies: an emptyDir the gateway writes and vLLM mounts read-only
ADMIN_KEY_DIR = f"{CONFIG_MOUNT}/admin"  # the server's admin-key Secret, mounted into the gateway only
ADMIN_KEY_ITEM = "key"  # the Secret's data key, and the file's name under ADMIN_KEY_DIR
# Not `Authorization`: the apiserver's authentication filter removes that header once it has authenticated the
# caller, so it never reaches a pod through the pod proxy. A header of our own passes.
ADMIN_KEY_HEADER = "X-Mmrl-Admin-Key"

ADMIN_PREFIX = "/mmrl/v1/"
ADAPTERS = "/mmrl/v1/adapters"  # GET: what the gateway staged and loaded, and what vLLM holds
LOAD = "/mmrl/v1/adapters/load"  # POST LoadRequest: stage, check, load
UNLOAD = "/mmrl/v1/adapters/unload"  # POST UnloadRequest
READY = "/mmrl/ready"  # the gateway's readiness: vLLM answers and holds everything the gateway loaded
LIVE = "/mmrl/live"  # the gateway's liveness

# What clients may ask vLLM: inference, tokenising, listing, health and metrics. Everything else vLLM serves (the
# runtime LoRA API, sleep and wake, weight updates, profiling, cache resets, RPCs) is the operator's or nobody's.
CLIENT_ROUTES = frozenset(
    {
        ("GET", "/health"),
        ("GET", "/ping"),
        ("GET", "/version"),
        ("GET", "/metrics"),
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/tokenize"),
        ("POST", "/detokenize"),
    }
)
LORA_PATHS = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")
# vLLM's own API key, when the server's env sets one: clients must send it (`Authorization: Bearer`), and the gateway
# sends it with its own calls to vLLM.
VLLM_API_KEY_ENV = "VLLM_API_KEY"

LORA_NAME = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
DIGEST = r"^[0-9a-f]{64}$"


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class LoadRequest(_Message):
    """Stage the adapter directory `source` (under the replica's adapter mounts) and load it as `name`."""

    name: str = Field(min_length=1, max_length=256, pattern=LORA_NAME)
    source: str = Field(min_length=2, max_length=4096, pattern=r"^/")
    digest: str = Field(pattern=DIGEST)
    """The manifest digest the trainer reported (`status.adapter.digest`): the copy must have it."""
    inplace: bool = False
    """Swap the weights of a name vLLM already holds (an alias that moves), so no request meets it missing."""
    base_model: str | None = Field(default=None, alias="baseModel", max_length=4096)
    """The model the job trained on, as its pods name it: the adapter's config must name it."""


class UnloadRequest(_Message):
    name: str = Field(min_length=1, max_length=256, pattern=LORA_NAME)


class HeldAdapter(_Message):
    digest: str
    loaded: bool
    """vLLM lists the name at this digest's staged copy."""


class Listing(_Message):
    """What one replica holds: the names the gateway loaded (and whether vLLM still holds each at its copy), the
    names vLLM lists (None when it does not answer), and the staged digests."""

    adapters: dict[str, HeldAdapter] = Field(default_factory=dict)
    vllm: dict[str, str] | None = None
    vllm_error: str = Field(default="", alias="vllmError")
    staged: list[str] = Field(default_factory=list)


def staged_path(digest: str, store: str = STORE) -> str:
    """Where the copy of the adapter with this digest lies, in the gateway and in vLLM."""
    return f"{store.rstrip('/')}/{digest}"
