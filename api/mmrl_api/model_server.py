"""The ModelServer resource: one vLLM server for one base model, into which the operator loads the adapters of the
jobs that name it (`spec.inference.server` of a MultimodalRLJob).

A dedicated server (a job's own `<job>-inference` Deployment) costs one base model's GPUs per adapter; a ModelServer
holds up to `maxAdapters` adapters beside one copy of the base model, loads a new one in seconds instead of starting
a server, and keeps the previous adapter loaded while an alias moves. The operator turns it into a Deployment and a
Service `<name>-vllm`, and reports its replicas, the adapters it holds and the conditions Ready, Reconciling and
Stalled (kstatus), like a job's.

Everything a replica must hold to serve a job's adapter is fixed here, on the server, because vLLM fixes it at
start: the LoRA rank it can hold (`maxLoraRank`), how many adapters one batch may mix (`maxLoras`) and how many it
keeps (`maxAdapters`), the context length and the image pixel cap. A job whose adapter does not fit is refused with
the reason in a condition, and the server is never restarted for it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from mmrl_api.base import ApiModel, cel, cel_rules, immutable
from mmrl_api.cluster import Toleration
from mmrl_api.constants import (
    API_VERSION,
    DEFAULT_VLLM_IMAGE,
    MAX_SERVER_NAME_LENGTH,
    SERVER_KIND,
    VLLM_LORA_RANKS,
)
from mmrl_api.job import NAME_RE
from mmrl_api.kube_syntax import ObjectName, label_map
from mmrl_api.kueue import field_errors
from mmrl_api.label_selector import LabelSelector
from mmrl_api.lifecycle import GPUS_CEL, GPUS_RULE, InferenceResources, PromotionGate
from mmrl_api.locations import MOUNT_PATH, SUB_PATH
from mmrl_api.manifest import FieldError, validate_document
from mmrl_api.rules import text
from mmrl_api.spec import DNS_LABEL, EnvFromSource, EnvVar, ModelSpec
from mmrl_api.status import MESSAGE_MAX, NAME_MAX, PATH_MAX, TIME, Condition, StatusModel
from mmrl_api.vllm_flags import NOT_AN_OWNED_FLAG, instead

ALIAS_HISTORY = 20
LORA_RANKS_CEL = "[" + ", ".join(str(r) for r in VLLM_LORA_RANKS) + "]"
ONE_CLAIM_ONCE = "each claim is mounted once: claimName must be unique"
ONE_PATH_ONCE = "two claims cannot share a mountPath"
ONE_ALIAS_ONCE = "each alias is declared once: name must be unique"
PIN_DECLARED = "aliasPins may only pin an alias the server declares in aliases"
ALIAS_NAME = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"


class AdapterVolume(ApiModel):
    """A claim that holds jobs' adapters (their checkpoint claim, e.g. FSx for Lustre), mounted read-only on every
    replica. Mount it at the path the jobs' pods mount it (their `checkpoint.pvc.mountPath`): an adapter is then at
    the same path in the trainer, in the job's status and in the server."""

    claim_name: str = Field(min_length=1, max_length=253, pattern=DNS_LABEL)
    mount_path: text(256, *MOUNT_PATH) = "/fsx"  # type: ignore[valid-type]
    """Absolute and normalised, and clear of the paths the operator mounts (/dev/shm, /etc/mmrl, /tmp, /mnt/pvc,
    /mnt/adapter)."""
    sub_path: text(256, *SUB_PATH) = "mmrl"  # type: ignore[valid-type]
    """The jobs' `checkpoint.pvc.subPath`. Only `<subPath>/<namespace>` of the claim is mounted (at
    `<mountPath>/<subPath>/<namespace>`): the server sees its own namespace's job directories and nothing else of
    the volume, so no adapter path or link in one can reach another team's files."""


class ServerAlias(ApiModel):
    """A stable name the server offers its clients (e.g. geo-prod), declared by the server's owner: which jobs may
    claim it (their `spec.inference.alias`) and the gate their adapters must pass, on top of their own, before it
    moves to them. A job that claims an alias the server does not declare, or that is outside its jobSelector, is
    refused (its condition InferenceReady says why) and its adapter is not loaded."""

    name: str = Field(min_length=1, max_length=128, pattern=ALIAS_NAME)
    job_selector: LabelSelector
    """The jobs (by their labels, in the server's namespace) that may claim the alias; `{}`: every job of the
    namespace. A job's labels are its own to set: give the right to label jobs this way only to whoever may publish
    under the alias (the namespace's RBAC, or an admission policy)."""
    promote_when: PromotionGate | None = None
    """The owner's gate: the adapter's held-out evaluation (`status.adapter.evaluation`) must pass it, as well as the
    job's own `promoteWhen`, before the alias may move to it. A job below it is refused (reason AliasGateNotMet)."""


class AliasPin(ApiModel):
    """Hold an alias on one job's adapter (a rollback): promotions do not move it while the pin is here."""

    alias: str = Field(min_length=1, max_length=128, pattern=ALIAS_NAME)
    job: str = Field(min_length=1, max_length=63, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    """The job whose adapter the alias points at; it must be held by the server."""


class ModelServerSpec(ApiModel):
    """One vLLM OpenAI server for one base model; jobs that name it have their adapters loaded into it."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(GPUS_CEL, GPUS_RULE, ".gpus"),
            cel("self.maxAdapters >= self.maxLoras", "maxAdapters must be at least maxLoras", ".maxAdapters"),
            cel(
                "!has(self.adapterVolumes) || self.adapterVolumes.all(v, "
                "self.adapterVolumes.exists_one(w, w.claimName == v.claimName))",
                ONE_CLAIM_ONCE,
                ".adapterVolumes",
            ),
            cel(
                "!has(self.adapterVolumes) || self.adapterVolumes.all(v, "
                "self.adapterVolumes.exists_one(w, w.mountPath == v.mountPath))",
                ONE_PATH_ONCE,
                ".adapterVolumes",
            ),
            cel(
                "!has(self.aliases) || self.aliases.all(a, self.aliases.exists_one(b, b.name == a.name))",
                ONE_ALIAS_ONCE,
                ".aliases",
            ),
            cel(
                "!has(self.aliasPins) || self.aliasPins.all(p, has(self.aliases) && "
                "self.aliases.exists(a, a.name == p.alias))",
                PIN_DECLARED,
                ".aliasPins",
            ),
        )
    }

    model: ModelSpec = Field(json_schema_extra=immutable("model"))
    """The base model every replica loads; a job's adapter must have been trained on it (same name and revision).
    Immutable: the adapters loaded into the server were trained on this one."""
    image: str = Field(default=DEFAULT_VLLM_IMAGE, min_length=1, max_length=512)
    """The vLLM OpenAI-server image; its entrypoint is replaced by `python3 -m vllm.entrypoints.openai.api_server`."""
    replicas: int = Field(default=1, ge=0, le=64)
    resources: InferenceResources = Field(default_factory=InferenceResources)
    """CPU/memory of each replica; GPUs are `gpus` per replica."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=16)
    gpus: int | None = Field(default=None, ge=0, le=16)
    """nvidia.com/gpu per replica; defaults to tensorParallelSize. 0 runs a CPU build of vLLM (set `image`)."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    max_lora_rank: int = Field(
        default=32,
        json_schema_extra=cel_rules(cel(f"self in {LORA_RANKS_CEL}", f"must be one of {LORA_RANKS_CEL}")),
    )
    """The largest LoRA rank the server can hold (vLLM's `--max-lora-rank`, one of the values vLLM accepts). An
    adapter of a larger rank is refused; a larger value costs GPU memory on every replica."""
    max_loras: int = Field(default=4, ge=1, le=64)
    """How many different adapters one batch may mix (vLLM's `--max-loras`): GPU memory for each."""
    max_adapters: int = Field(default=8, ge=1, le=256)
    """How many adapters the server holds at once (vLLM's `--max-cpu-loras`), aliases' targets included. A job
    whose adapter would be one more waits, with condition Promoted=False (reason ServerFull), until one is
    unloaded; the operator never unloads an adapter to make room."""
    max_model_len: int = Field(default=4096, ge=256, le=1_048_576)
    """The longest conversation one request may hold (vLLM's `--max-model-len`). A job whose adapter was trained on
    longer conversations is refused: the server would reject, with a 400, conversations the adapter learned on."""
    max_image_pixels: int | None = Field(default=None, ge=3136, le=100_000_000)
    """Resize every image under this many pixels (vLLM's `--mm-processor-kwargs`); unset: the model's own
    processor settings. A job whose adapter was trained under a smaller cap is refused: the model would meet
    images larger, in tokens, than any it learned on."""
    max_images_per_prompt: int = Field(default=2, ge=0, le=64)
    adapter_volumes: list[AdapterVolume] = Field(default_factory=list, max_length=8)
    """The claims the adapters are read from. A job's adapter can be loaded only when its checkpoint claim is one
    of these, mounted at the job's mount path."""
    env: list[EnvVar] = Field(default_factory=list, max_length=64)
    """The server's environment, e.g. HF_TOKEN from a Secret for a gated hub model (credentials only by
    valueFrom.secretKeyRef)."""
    env_from: list[EnvFromSource] = Field(default_factory=list, max_length=16)
    service_account_name: ObjectName | None = None  # type: ignore[valid-type]
    """The replicas' ServiceAccount, for IRSA / pod identity when the model is on S3; its API token is never
    mounted. Unset: the namespace's default."""
    node_selector: label_map(16) = Field(default_factory=dict)  # type: ignore[valid-type]
    tolerations: list[Toleration] = Field(default_factory=list, max_length=16)
    hyperpod: bool = True
    """Keep replicas off HyperPod nodes marked unhealthy, and prefer nodes whose deep health check passed."""
    image_pull_secrets: list[ObjectName] = Field(default_factory=list, max_length=8)  # type: ignore[valid-type]
    extra_args: list[text(1024, NOT_AN_OWNED_FLAG, hint=instead)] = Field(  # type: ignore[valid-type]
        default_factory=list, max_length=32
    )
    """Extra `vllm serve` arguments. None may name a flag the operator sets from the fields above
    (mmrl_api.vllm_flags: --max-lora-rank, --max-model-len, --host, --port, ...; any spelling or abbreviation)."""
    aliases: list[ServerAlias] = Field(default_factory=list, max_length=16)
    """The aliases clients may call, and which jobs may claim each. A job may claim only an alias declared here."""
    alias_pins: list[AliasPin] = Field(default_factory=list, max_length=32)
    """Aliases held on one job's adapter whatever is promoted later: what `mmrl rollback` writes. Remove a pin to let
    the alias follow promotions again."""

    @field_validator("max_lora_rank")
    @classmethod
    def _a_rank_vllm_accepts(cls, rank: int) -> int:
        if rank not in VLLM_LORA_RANKS:
            raise ValueError(f"must be one of {LORA_RANKS_CEL}")
        return rank

    @model_validator(mode="after")
    def _consistent(self) -> ModelServerSpec:
        """The Python side of the CEL rules above, each named by the field its rule's fieldPath names."""
        found: list[tuple[tuple[str, ...], str, Any]] = []
        if self.gpus and self.gpus < self.tensor_parallel_size:
            found.append((("gpus",), GPUS_RULE, self.gpus))
        if self.max_adapters < self.max_loras:
            found.append((("maxAdapters",), "maxAdapters must be at least maxLoras", self.max_adapters))
        for field, message in (("claim_name", ONE_CLAIM_ONCE), ("mount_path", ONE_PATH_ONCE)):
            values = [getattr(v, field) for v in self.adapter_volumes]
            if len(values) != len(set(values)):
                found.append((("adapterVolumes",), message, values))
        declared = [a.name for a in self.aliases]
        if len(declared) != len(set(declared)):
            found.append((("aliases",), ONE_ALIAS_ONCE, declared))
        if any(p.alias not in declared for p in self.alias_pins):
            found.append((("aliasPins",), PIN_DECLARED, [p.alias for p in self.alias_pins]))
        if found:
            raise field_errors(found)
        return self


class ServedAdapter(StatusModel):
    """An adapter the server is to hold, and where it is held."""

    name: str = Field(max_length=NAME_MAX)
    """The name clients pass as `model`: the job's inference.servedModelName, or the job's name."""
    job: str = Field(max_length=NAME_MAX)
    job_uid: str = Field(default="", max_length=64)
    """The job object it came from: a job deleted and created again under the name is another one."""
    alias: str = Field(default="", max_length=NAME_MAX)
    """The alias its job claims (spec.inference.alias)."""
    path: str = Field(max_length=PATH_MAX)
    sha256: str = Field(default="", max_length=64)
    digest: str = Field(default="", max_length=64)
    """The digest of the adapter's files the trainer reported (`status.adapter.digest`): every replica's gateway
    loads a checked copy of exactly these files."""
    rank: int | None = None
    held_out_reward: float | None = None
    loaded_on: list[str] = Field(default_factory=list, max_length=64)
    """The ready replicas (pods) that hold it."""
    since: str | None = TIME
    """When the server took it on."""
    promoted: str | None = TIME
    """When its job was promoted (its Promoted condition turned True): an alias follows the latest promotion, which
    a second check of the same files (they leave the held set and come back, `since` anew) does not change."""
    error: str = Field(default="", max_length=2048)
    """The last load that failed, as vLLM answered it."""
    failed_passes: int = Field(default=0, ge=0, le=1000)
    """Passes in a row in which it loaded on no replica and a load failed; at the server's limit these files are
    refused (`status.refused`, reason `Quarantined`) and never tried again."""


class AliasMove(StatusModel):
    """One adapter an alias pointed at, from when to when (absent `until`: it still does)."""

    job: str = Field(max_length=NAME_MAX)
    adapter: str = Field(max_length=NAME_MAX)
    since: str | None = TIME
    until: str | None = TIME
    held_out_reward: float | None = None


class AliasStatus(StatusModel):
    """A stable name clients call, and the adapter it points at."""

    name: str = Field(max_length=NAME_MAX)
    job: str = Field(max_length=NAME_MAX)
    adapter: str = Field(max_length=NAME_MAX)
    path: str = Field(max_length=PATH_MAX)
    digest: str = Field(default="", max_length=64)
    """The target adapter's digest: the alias is that copy loaded once more under the alias's name."""
    pinned: bool = False
    """Held by spec.aliasPins (a rollback): promotions do not move it."""
    loaded_on: list[str] = Field(default_factory=list, max_length=64)
    history: list[AliasMove] = Field(default_factory=list, max_length=ALIAS_HISTORY)
    """The adapters it pointed at, oldest first, the current one last (the last ALIAS_HISTORY)."""
    error: str = Field(default="", max_length=2048)
    """Why the alias is not where its spec or its claims would put it: a move to another adapter that failed on
    every replica (the alias still points where it did; the next pass tries again), or a pin to a job the server
    does not hold (it follows promotions until the pin is removed or the job is held again)."""


class RefusedAdapter(StatusModel):
    """A job that names the server and is not loaded, and why (the job's InferenceReady condition says it too)."""

    job: str = Field(max_length=NAME_MAX)
    name: str = Field(default="", max_length=NAME_MAX)
    reason: str = Field(max_length=128)
    message: str = Field(default="", max_length=2048)
    digest: str = Field(default="", max_length=64)
    """For `Quarantined`: the files refused. The job's next export (other files) is tried again."""


class ModelServerStatus(StatusModel):
    observed_generation: int | None = None
    phase: Literal["Pending", "Deploying", "Ready", "Degraded", "ScaledToZero"] | None = None
    message: str = Field(default="", max_length=MESSAGE_MAX)
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    replicas: int | None = None
    ready_replicas: int | None = None
    service: str | None = Field(default=None, max_length=NAME_MAX)
    url: str | None = Field(default=None, max_length=PATH_MAX)
    """The OpenAI base URL inside the cluster."""
    model: str | None = Field(default=None, max_length=NAME_MAX)
    """The name the base model is served under."""
    adapters: list[ServedAdapter] = Field(default_factory=list, max_length=256)
    aliases: list[AliasStatus] = Field(default_factory=list, max_length=64)
    refused: list[RefusedAdapter] = Field(default_factory=list, max_length=256)
    adapter_count: int | None = None
    """How many adapters the server is to hold (`kubectl get modelservers` prints it)."""


class ServerMeta(ApiModel):
    model_config = ApiModel.model_config | {"extra": "allow"}

    name: str = Field(min_length=1)
    namespace: str | None = None


def server_name_problems(name: str) -> list[str]:
    out = []
    if len(name) > MAX_SERVER_NAME_LENGTH:
        out.append(
            f"{len(name)} characters is too long: at most {MAX_SERVER_NAME_LENGTH}, so that `<name>-vllm` names a "
            "Service"
        )
    if not NAME_RE.match(name):
        out.append(f"{name!r} must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter")
    return out


# metadata.name is the only metadata a CRD rule may read; see job.ROOT_RULES.
SERVER_ROOT_RULES = cel_rules(
    cel(
        f"size(self.metadata.name) <= {MAX_SERVER_NAME_LENGTH}",
        f"metadata.name must be at most {MAX_SERVER_NAME_LENGTH} characters so that `<name>-vllm` names a Service",
        reason="FieldValueInvalid",
    ),
    cel(
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must be a DNS-1035 label (start with a letter): it names the server's Service",
        reason="FieldValueInvalid",
    ),
)


class ModelServer(ApiModel):
    api_version: Literal["mmrl.dev/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["ModelServer"] = SERVER_KIND
    metadata: ServerMeta
    spec: ModelServerSpec
    status: ModelServerStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"


def validate_server_manifest(doc: Any) -> tuple[ModelServer | None, list[FieldError]]:
    """Validate one parsed ModelServer document; return the model (when valid) and every error with its path."""
    return validate_document(doc, ModelServer, server_name_problems)


def parse_server(obj: dict[str, Any]) -> ModelServer:
    """Parse a ModelServer read from the cluster; raise ValueError naming every bad field."""
    server, errors = validate_server_manifest(obj)
    if server is None:
        raise ValueError("; ".join(str(e) for e in errors))
    return server
