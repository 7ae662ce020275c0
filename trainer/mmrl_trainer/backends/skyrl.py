"""The SkyRL backend at run time; the settings themselves come from `skyrl_config`.

`run` needs the trainer image (SkyRL, Ray, vLLM, GPUs): it converts the dataset to SkyRL's VLM rows, registers the
`mmrl_reward` environment (`mmrl_episode` for a multi-turn environment, or the job's own SkyRL-Gym class as
`mmrl_skyrl_gym`) inside the `@ray.remote` entry (env creation happens in that process) and runs
`BasePPOExp(cfg).run()`. Checkpoints (`global_step_N/` + marker) and resume are SkyRL's own; afterwards the final
LoRA adapter is copied to `export_dir` and checked for vLLM. Before SkyRL reads the marker the driver repairs a torn
one (checkpoint.repair_marker), and only an attempt that starts from no checkpoint evaluates the base model
(lineage.baseline_due): SkyRL would do it after every resume.

Before anything slow starts, the driver fails an attempt that cannot succeed: one whose GPU count differs from the
checkpoint it would resume (world_size.py) and settings SkyRL's own config classes and `validate_cfg` reject, both
InvalidConfig. The entry task runs on a worker (the head has no CPUs for it), so nothing it reads may sit on the
driver's disk: the parquet goes to `<checkpoint.dir>/data/` (the shared volume, or S3, from which the entry task
copies it to its own node), and the model is staged on the shared volume (staging.py).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from mmrl_api.spec import RewardSpec
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer import storage
from mmrl_trainer.backends.skyrl_config import build_skyrl_config, skyrl_environment, skyrl_overrides, skyrl_paths
from mmrl_trainer.backends.skyrl_progress import SkyRLProgress, experiment_class
from mmrl_trainer.checkpoint import MARKER, STEP_PREFIX
from mmrl_trainer.data import SKYRL_ENV_CLASS, SKYRL_EPISODE_ENV_CLASS, SKYRL_GYM_ENV_CLASS
from mmrl_trainer.errors import InvalidConfig
from mmrl_trainer.lineage import baseline_due
from mmrl_trainer.staging import model_path
from mmrl_trainer.world_size import SavedCheckpoint, check_resume_world_size

log = logging.getLogger("mmrl_trainer.skyrl")
ENV_ENTRY_POINT = "mmrl_trainer.backends.skyrl_env:RewardEnv"
EPISODE_ENV_ENTRY_POINT = "mmrl_trainer.backends.skyrl_episode_env:EpisodeEnv"


def skyrl_gym_registration(cfg: TrainerConfig) -> dict[str, Any]:
    """`skyrl_gym.envs.register` arguments for this job's environment, as SkyRL's examples register theirs in the
    entry task: our rewards (single turn), an episode of the dataset's environment with its spec as kwargs, or the
    job's own SkyRL-Gym class with its params as kwargs."""
    environment = cfg.dataset.environment
    if environment is not None and environment.name == "skyrl-gym":
        # The job's own SkyRL-Gym class, as it is; params are its constructor's keyword arguments.
        return {"id": SKYRL_GYM_ENV_CLASS, "entry_point": environment.class_path, "kwargs": dict(environment.params)}
    if environment is not None:
        return {
            "id": SKYRL_EPISODE_ENV_CLASS,
            "entry_point": EPISODE_ENV_ENTRY_POINT,
            "kwargs": {"environment": environment.wire()},
        }
    reward = cfg.dataset.reward or RewardSpec()
    return {
        "id": SKYRL_ENV_CLASS,
        "entry_point": ENV_ENTRY_POINT,
        "kwargs": {"reward": json.loads(reward.model_dump_json(by_alias=False))},
    }


class SkyRLData(NamedTuple):
    train: list[str]
    val: list[str]
    images_per_prompt: int
    """The most images one prompt carries: what the image token budget must fit (skyrl_config.image_budget)."""
    train_rows: int = 0
    """Training prompts written; SkyRL may drop overlong ones, never add any."""


def _most_images(rows: list[dict[str, Any]]) -> int:
    return max(
        (
            sum(
                1
                for m in r["prompt"]
                if isinstance(m["content"], list)
                for p in m["content"]
                if p["type"] == "image_url"
            )
            for r in rows
        ),
        default=0,
    )


def materialise_data(cfg: TrainerConfig, data_dir: Path) -> SkyRLData:
    """Write SkyRL VLM parquet files for train/validation; returns their paths and the most images in a prompt.
    A job's environment is built once first: here in the driver, a bad param or class is InvalidInput (exit 3);
    found in a Ray worker, it would come back as a retried application failure."""
    from mmrl_trainer.data import load_examples, write_skyrl_data

    check_environment(cfg)
    train = data_dir / "train.parquet"
    rows = write_skyrl_data(
        load_examples(cfg.dataset.train, cfg.dataset, seed=cfg.seed),
        cfg.dataset,
        data_source=cfg.dataset.train,
        path=train,
    )
    images, train_rows = _most_images(rows), len(rows)
    val: list[str] = []
    if cfg.dataset.validation:
        rows = write_skyrl_data(
            load_examples(cfg.dataset.validation, cfg.dataset, seed=cfg.seed + 1),
            cfg.dataset,
            data_source=cfg.dataset.validation,
            path=data_dir / "validation.parquet",
        )
        val = [str(data_dir / "validation.parquet")]
        images = max(images, _most_images(rows))
    return SkyRLData([str(train)], val, max(1, images), train_rows)


def check_environment(cfg: TrainerConfig) -> None:
    """Our environments are built once (params checked); a SkyRL-Gym class is imported and must be a skyrl_gym
    Env, since SkyRL builds it per episode with each row's extras, which only the rows have."""
    environment = cfg.dataset.environment
    if environment is None:
        return
    if environment.name != "skyrl-gym":
        from mmrl_trainer.envs import make_episode

        make_episode(environment)
        return
    from skyrl_gym import Env

    from mmrl_trainer.envs.episode import CLASS_FIELD
    from mmrl_trainer.imports import import_named

    assert environment.class_path is not None  # the API requires it for skyrl-gym
    import_named(
        environment.class_path,
        CLASS_FIELD,
        lambda found: isinstance(found, type) and issubclass(found, Env),
        "skyrl_gym Env subclass",
    )


class Exported(NamedTuple):
    local: Path
    """The checked adapter on this machine (report_adapter reads it)."""
    path: str
    """Where it lies for serving: export_dir (a mounted path or s3://)."""
    step: int | None = None
    """The checkpoint step it was exported from."""


def shared_data(cfg: TrainerConfig) -> SkyRLData:
    """The parquet files under `<checkpoint.dir>/data/`, where the entry task's node can read them."""
    target = skyrl_paths(cfg).data  # what --dry-run prints
    if not storage.is_s3(target):
        return materialise_data(cfg, Path(target))
    with tempfile.TemporaryDirectory(prefix="mmrl-data-") as tmp:
        local = materialise_data(cfg, Path(tmp))
        storage.upload_tree(Path(tmp), target)
    return SkyRLData(
        [storage.join(target, Path(f).name) for f in local.train],
        [storage.join(target, Path(f).name) for f in local.val],
        local.images_per_prompt,
        local.train_rows,
    )


def localise_data(skyrl_cfg: Any, dest: Path) -> None:
    """Point SkyRL's data settings at local copies of s3:// parquet (SkyRL's PromptDataset reads local files)."""
    for key in ("train_data", "val_data"):
        local = []
        for uri in getattr(skyrl_cfg.data, key):
            if storage.is_s3(uri):
                uri = str(storage.download_file(uri, dest / key / uri.rsplit("/", 1)[-1]))
            local.append(uri)
        setattr(skyrl_cfg.data, key, local)


def checked_skyrl_config(overrides: dict[str, Any]) -> Any:
    """SkyRL's config from our settings, validated by SkyRL (`validate_cfg`); what SkyRL rejects is InvalidConfig
    with SkyRL's own message (its checks are asserts and ValueErrors, its dataclasses raise on unknown keys)."""
    from skyrl.train.utils import validate_cfg

    try:
        skyrl_cfg = build_skyrl_config(overrides)
        validate_cfg(skyrl_cfg)
    except (AssertionError, ValueError, TypeError, KeyError) as err:
        raise InvalidConfig(f"SkyRL rejected the settings made from the spec: {type(err).__name__}: {err}") from err
    return skyrl_cfg


def _finish_adapter(source: Path, target: Path, cfg: TrainerConfig) -> Path:
    """`source`'s adapter copied to `target`, named for the model we trained, and checked for vLLM."""
    from mmrl_trainer.adapter import check_adapter_dir, readable_by_all

    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    readable_by_all(target)  # copytree keeps the source's modes; a server reads it as another user
    # We know which model was trained; SkyRL may have recorded a resolved local path of it instead.
    cfg_file = target / "adapter_config.json"
    adapter_cfg = json.loads(cfg_file.read_text())
    adapter_cfg["base_model_name_or_path"] = cfg.model.name
    cfg_file.write_text(json.dumps(adapter_cfg, indent=2))
    check_adapter_dir(target, base_model=cfg.model.name)
    return target


def export_final_adapter(cfg: TrainerConfig) -> Exported:
    """The newest complete step's LoRA adapter, checked, at export_dir (SkyRL's FSDP strategy writes the PEFT
    adapter to global_step_N/policy/lora_adapter/: FSDPStrategy._save_lora_adapters)."""
    if not storage.is_s3(cfg.checkpoint.dir):
        return _export_local(cfg)
    marker = (storage.read_text(storage.join(cfg.checkpoint.dir, MARKER)) or "").strip()
    if not marker.isdigit():
        raise RuntimeError(f"no complete checkpoint under {cfg.checkpoint.dir} to export the adapter from")
    source = storage.join(cfg.checkpoint.dir, f"{STEP_PREFIX}{marker}", "policy", "lora_adapter")
    work = Path(tempfile.mkdtemp(prefix="mmrl-adapter-"))
    if storage.download_tree(source, work / "source") == 0:
        raise RuntimeError(f"{source} has no LoRA adapter")
    local = _finish_adapter(work / "source", work / "adapter", cfg)
    if storage.is_s3(cfg.export_dir):
        storage.upload_tree(local, cfg.export_dir)
        return Exported(local, cfg.export_dir, int(marker))
    return Exported(_finish_adapter(local, Path(cfg.export_dir), cfg), cfg.export_dir, int(marker))


def _export_local(cfg: TrainerConfig) -> Exported:
    latest = ckpt.latest_complete(cfg.checkpoint.dir)
    if latest is None:
        raise RuntimeError(f"no complete checkpoint under {cfg.checkpoint.dir} to export the adapter from")
    source = latest.path / "policy" / "lora_adapter"
    if not (source / "adapter_config.json").is_file():
        found = sorted(latest.path.rglob("adapter_config.json"))
        if not found:
            raise RuntimeError(f"{latest.path} has no LoRA adapter (adapter_config.json)")
        source = found[0].parent
    return Exported(_finish_adapter(source, Path(cfg.export_dir), cfg), cfg.export_dir, latest.step)


def repair_resume_marker(cfg: TrainerConfig) -> ckpt.MarkerRepair | None:
    """Before anything reads the marker (progress, the world-size check, SkyRL's load_checkpoints): make it name the
    newest complete step (checkpoint.repair_marker). Not for s3://, where SkyRL's write is one PUT that replaces the
    object whole, so a lost node leaves the old marker, never a torn one."""
    if cfg.resume != "latest" or storage.is_s3(cfg.checkpoint.dir):
        return None
    repair = ckpt.repair_marker(cfg.checkpoint.dir)
    if repair is not None:
        now = f"set aside at {repair.set_aside}: starting from step 0" if repair.step is None else f"now {repair.step}"
        log.warning("checkpoint marker in %s read %r; %s", cfg.checkpoint.dir, repair.found, now)
    return repair


def prepare(cfg: TrainerConfig, *, attempt: int | None = None) -> Any:
    """Everything an attempt does before SkyRL runs, on the driver, in order; returns SkyRL's checked config."""
    return _prepare(cfg, attempt)[0]


def _prepare(cfg: TrainerConfig, attempt: int | None) -> tuple[Any, SkyRLData, SavedCheckpoint | None]:
    """`prepare`, also returning the data it wrote and the checkpoint SkyRL will resume (None: from step 0)."""
    os.environ.update(skyrl_environment(cfg))  # before skyrl is imported: it reads some variables at import
    repair_resume_marker(cfg)
    # Before the slow part (data, Ray, model and engine start-up): the attempt and the step it resumes from.
    progress = SkyRLProgress.from_config(cfg, attempt=attempt)
    progress.started()
    resumes = check_resume_world_size(cfg)  # the step SkyRL will load; None: it starts from step 0
    data = shared_data(cfg)
    overrides = skyrl_overrides(
        cfg,
        train_files=data.train,
        val_files=data.val,
        model_path=model_path(cfg),
        images_per_prompt=data.images_per_prompt,
        eval_before_train=baseline_due(progress.reporter.metrics_file, resuming=resumes is not None),
    )
    return checked_skyrl_config(overrides), data, resumes


def last_step(cfg: TrainerConfig, train_rows: int) -> int:
    """The run's last step as SkyRL counts it, or more: its dataloader drops the last partial batch, and its dataset
    may drop overlong prompts, so `rows // trainBatchSize` batches per epoch is never fewer than SkyRL's."""
    algo = cfg.algorithm
    steps = train_rows // algo.train_batch_size * algo.epochs
    return min(steps, algo.max_steps) if algo.max_steps else steps


def final_step_sealed(cfg: TrainerConfig, saved: SavedCheckpoint | None, train_rows: int) -> int | None:
    """The step of `saved`, the checkpoint the attempt resumes, when it is already the run's last (`last_step`), else
    None. An attempt can start after the previous one sealed its final step (stopped, or its RayJob replaced, before
    it ended). Resumed there, SkyRL's loop would train one step past `max_training_steps` (it checks after a step,
    RayPPOTrainer.train) and seal it, or, at the end of its last epoch, save that step again in place, where a kill
    would tear a sealed checkpoint. The attempt exports the sealed step instead."""
    last = last_step(cfg, train_rows)
    return saved.step if saved is not None and last > 0 and saved.step >= last else None


def run(cfg: TrainerConfig, *, attempt: int | None = None) -> Exported:
    skyrl_cfg, data, resumes = _prepare(cfg, attempt)
    if (step := final_step_sealed(cfg, resumes, data.train_rows)) is None:
        _train(cfg, skyrl_cfg, attempt)  # pragma: no cover - needs the GPU image
    else:
        log.info("resuming from step %d, the run's last: exporting it, no training", step)
        SkyRLProgress.from_config(cfg, attempt=attempt).on_train_end(step, step)
    return export_final_adapter(cfg)


def _train(cfg: TrainerConfig, skyrl_cfg: Any, attempt: int | None) -> None:  # pragma: no cover - needs GPUs
    import ray
    from skyrl.train.utils.utils import initialize_ray

    registration = skyrl_gym_registration(cfg)

    # No retries: a node lost under the entry task ends this attempt, and the operator starts the next one from
    # the latest complete checkpoint. Ray's default (3 retries) would rerun training inside the same attempt.
    @ray.remote(num_cpus=1, max_retries=0)
    def entry(skyrl_cfg) -> None:
        # Registration must happen in the process that builds the generator and its environments.
        import skyrl_gym

        localise_data(skyrl_cfg, Path(tempfile.mkdtemp(prefix="mmrl-data-")))
        skyrl_gym.envs.register(**registration)
        # Progress and heartbeats come from SkyRL's training loop, which runs in this process.
        experiment_class(SkyRLProgress.from_config(cfg, attempt=attempt))(skyrl_cfg).run()

    initialize_ray(skyrl_cfg)
    ray.get(entry.remote(skyrl_cfg))
