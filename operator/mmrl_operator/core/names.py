"""Names, labels and paths derived from a job: one function each, so every module agrees on them.

A retry is a new RayJob `<name>-a<N>` on the same RayCluster `<name>`; the attempt number in the name is what
makes creation idempotent across operator restarts (a second create of the same attempt is the same object).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmrl_api import constants as c

if TYPE_CHECKING:  # annotations only: the watch caches use these names before any model is built (issue #32)
    from mmrl_api import MultimodalRLJob
    from mmrl_api.model_server import ModelServer


def raycluster_name(job_name: str) -> str:
    return job_name


PREFLIGHT_ATTEMPT = 0
"""The preflight (`spec.preflight`) runs as attempt 0, RayJob `<name>-a0`: the same name form, so the same owner,
label, adoption and one-at-a-time rules hold for it, and it fits the same name-length limit."""


def rayjob_name(job_name: str, attempt: int) -> str:
    return f"{job_name}-a{attempt}"


MAX_ATTEMPT_DIGITS = 6
"""Attempt numbers have at most this many digits: a name like `<job>-a<10^200>` is not an attempt of any job."""


def attempt_of(rayjob_name_: str, job_name: str) -> int | None:
    """The attempt number encoded in a RayJob name of this job's form, or None. The name says only where to look:
    whether the RayJob is the job's is its controller reference's business (see `ownership`)."""
    prefix = f"{job_name}-a"
    tail = rayjob_name_.removeprefix(prefix)
    if not rayjob_name_.startswith(prefix) or not tail.isascii() or not tail.isdigit():
        return None
    if len(tail) > MAX_ATTEMPT_DIGITS or (tail.startswith("0") and tail != "0"):
        return None
    return int(tail)


def config_map_name(job_name: str) -> str:
    return f"{job_name}-trainer-config"


TRAINER_IDENTITY = "mmrl-trainer"
"""The trainers' identity in each namespace: the ServiceAccount every job's Ray pods, vLLM Deployment and adapter
check run as, and the Role and RoleBinding that let it patch job status. One fixed name per namespace, so an EKS Pod
Identity association (namespace + ServiceAccount name) can name it; the admission policy scopes each token to the
job whose Ray pod it is bound to (codegen/trainer_status_policy.py)."""

LEGACY_TRAINER_SA_SUFFIX = "-trainer"
"""Jobs reconciled before the per-namespace identity ran as `<job>-trainer`; the status policy still holds those
ServiceAccounts to the trainer's fields until their jobs are gone."""

RAY_POD_PREFIX_MAX = 50
"""KubeRay v1.5 cuts a Ray pod name's prefix (the cluster name for the head, `<cluster>-<group>` for workers) to 50
characters (`utils.PodName`), so that `-worker-` and the apiserver's 5 generated characters fit 63."""

GENERATED_SUFFIX_LENGTH = 5
"""The apiserver appends 5 characters to a generateName (lowercase letters and digits)."""


def ray_head_pod_prefix(job_name: str) -> str:
    """The head pod's generateName as KubeRay gives it (`<cluster>-head-`); with KubeRay's deterministic head pod
    names (ENABLE_DETERMINISTIC_HEAD_POD_NAME) the head is named this without the final dash."""
    return f"{raycluster_name(job_name)[:RAY_POD_PREFIX_MAX]}-head-"


def ray_worker_pod_prefix(job_name: str, group: str) -> str:
    """A worker pod's generateName as KubeRay gives it: `<cluster>-<group>` cut to 50 characters, then `-worker-`."""
    return f"{f'{raycluster_name(job_name)}-{group}'[:RAY_POD_PREFIX_MAX]}-worker-"


def inference_name(job_name: str) -> str:
    return f"{job_name}-inference"


def admin_secret_name(server_name: str) -> str:
    """The Secret with a ModelServer's admin key (its gateway's)."""
    return f"{server_name}-vllm-admin"


def network_policy_name(job_name: str) -> str:
    return f"{job_name}-ray"


def job_labels(job_name: str, component: str) -> dict[str, str]:
    return {c.LABEL_JOB: job_name, c.LABEL_COMPONENT: component, c.LABEL_MANAGED_BY: c.MANAGED_BY}


def kueue_labels(job: MultimodalRLJob) -> dict[str, str]:
    kueue = job.spec.cluster.kueue
    if kueue is None:
        return {}
    out = {c.KUEUE_QUEUE_LABEL: kueue.queue_name}
    if kueue.priority_class:
        out[c.KUEUE_PRIORITY_LABEL] = kueue.priority_class
    return out


def object_uid(obj: MultimodalRLJob | ModelServer) -> str:
    """metadata.uid of a job or server read from the apiserver; "" for one that was never stored."""
    uid = (obj.metadata.model_extra or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def job_uid(job: MultimodalRLJob) -> str:
    return object_uid(job)


def uid8(job: MultimodalRLJob) -> str:
    return job_uid(job).replace("-", "")[:8] or "nouid"


def hf_cache_dir(job: MultimodalRLJob) -> str | None:
    """`<root>/<namespace>/.cache/huggingface` on the checkpoint claim: the Hugging Face cache (HF_HOME) of every job of
    the namespace on that claim, so a hub model is downloaded once per namespace and claim, not by every Ray pod on
    every attempt. None for S3 checkpoints (no shared filesystem)."""
    pvc = job.spec.checkpoint.pvc
    if pvc is None:
        return None
    return f"{pvc.mount_path.rstrip('/')}/{pvc.sub_path.strip('/')}/{job.namespace}/.cache/huggingface"


def job_dir(job: MultimodalRLJob) -> str:
    """`<root>/<namespace>/<name>-<uid8>`: unique per job object, so a re-created job never resumes a stranger."""
    ckpt = job.spec.checkpoint
    leaf = f"{job.namespace}/{job.name}-{uid8(job)}"
    if ckpt.pvc is not None:
        return f"{ckpt.pvc.mount_path.rstrip('/')}/{ckpt.pvc.sub_path.strip('/')}/{leaf}"
    assert ckpt.s3 is not None
    return f"{ckpt.s3.uri.rstrip('/')}/{leaf}"
