"""`spec.tracking`: where a job's training curves go besides status.progress.

TensorBoard event files are always written to `<jobDir>/tracking/tensorboard` and need no settings. MLflow and
Weights & Biases are opt-in sinks. Their credentials are never in the spec: they come from Secrets, which the
operator passes by secretKeyRef as the variables the client libraries read (MLFLOW_TRACKING_USERNAME,
MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_TOKEN, WANDB_API_KEY) on every Ray container.
Each job has one run per sink. Every attempt logs to it, and the run's id is kept in the job directory
(`tracking/runs.json`), so a resume continues the run instead of starting one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationInfo, field_validator

from mmrl_api.base import ApiModel, cel, cel_rules
from mmrl_api.credentials import NO_URL_WITH_PASSWORD
from mmrl_api.kube_syntax import ObjectName
from mmrl_api.rules import Rule, text
from mmrl_api.spec import SecretKeyRef

HTTP_URL = Rule(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$", "must be an http:// or https:// URL")
# MLflow experiment names are free text server-side; here they also become a path segment in URLs and logs.
EXPERIMENT = Rule(r"^[A-Za-z0-9][A-Za-z0-9 ._/-]*$", "must be letters, digits, spaces and . _ / -, starting alnum")
WANDB_NAME = Rule(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "must be letters, digits and . _ -, starting with one of the first two"
)

MLFLOW_CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
WANDB_KEY_ONLINE = "apiKeySecretRef is required unless mode is offline (W&B refuses an online run without one)"


class MlflowSpec(ApiModel):
    """An MLflow tracking server. The trainer creates the experiment if it does not exist, one run per job."""

    tracking_uri: text(512, HTTP_URL, NO_URL_WITH_PASSWORD, min_length=1)  # type: ignore[valid-type]
    """The tracking server's URL, such as http://mlflow.mlflow.svc:5000 (no credentials in it)."""
    experiment: text(256, EXPERIMENT) | None = None  # type: ignore[valid-type]
    """The experiment's name; default: the job's namespace."""
    credentials_secret: ObjectName | None = None  # type: ignore[valid-type]
    """A Secret of the job's namespace with the keys MLflow's client reads: MLFLOW_TRACKING_USERNAME and
    MLFLOW_TRACKING_PASSWORD (basic auth) or MLFLOW_TRACKING_TOKEN (bearer). Each is passed by secretKeyRef."""


class WandbSpec(ApiModel):
    """A Weights & Biases project. The run's id is `<namespace>-<name>-<uid prefix>`, one run per job."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                "has(self.apiKeySecretRef) || (has(self.mode) && self.mode == 'offline')",
                WANDB_KEY_ONLINE,
                ".apiKeySecretRef",
            ),
        )
    }

    project: text(128, WANDB_NAME, min_length=1)  # type: ignore[valid-type]
    entity: text(128, WANDB_NAME) | None = None  # type: ignore[valid-type]
    """The team or user that owns the project; default: the API key's default entity."""
    mode: Literal["online", "offline"] = "online"
    """offline writes the run to `<jobDir>/tracking/wandb` only (for clusters without egress); `wandb sync` uploads
    it later, every attempt into the same run."""
    api_key_secret_ref: SecretKeyRef | None = None
    """The API key (WANDB_API_KEY), from a Secret."""
    base_url: text(512, HTTP_URL, NO_URL_WITH_PASSWORD) | None = None  # type: ignore[valid-type]
    """A self-hosted W&B server (WANDB_BASE_URL); default: W&B's cloud."""

    @field_validator("api_key_secret_ref")
    @classmethod
    def _key_online(cls, key: SecretKeyRef | None, info: ValidationInfo) -> SecretKeyRef | None:
        if key is None and info.data.get("mode", "online") != "offline" and "mode" in info.data:
            raise ValueError(WANDB_KEY_ONLINE)
        return key


class TrackingSpec(ApiModel):
    """Experiment tracking. TensorBoard files are always written; MLflow and W&B are added when set."""

    mlflow: MlflowSpec | None = None
    wandb: WandbSpec | None = None


def secret_env(tracking: TrackingSpec) -> dict[str, dict[str, object]]:
    """The environment variables the sinks' client libraries read their credentials from, as secretKeyRefs.
    MLflow's keys are optional: a Secret holds either the basic-auth pair or a token."""
    out: dict[str, dict[str, object]] = {}
    if tracking.mlflow is not None and tracking.mlflow.credentials_secret is not None:
        for var in MLFLOW_CREDENTIALS:
            out[var] = {"name": tracking.mlflow.credentials_secret, "key": var, "optional": True}
    if tracking.wandb is not None and tracking.wandb.api_key_secret_ref is not None:
        out["WANDB_API_KEY"] = tracking.wandb.api_key_secret_ref.wire()
    return out
