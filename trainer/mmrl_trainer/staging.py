"""The base model as a directory every Ray pod reads, staged once per job on the checkpoint volume.

SkyRL hands `trainer.policy.model.path` to transformers and vLLM on every node, which read local directories or hub
ids, not s3:// prefixes, and which load a hub id's default branch: SkyRL 0.3.0 has no revision setting. So an s3://
model, and a hub model pinned by `model.revision` (the revision serving pins), are staged under
`<checkpoint.dir>/models/` on the shared checkpoint volume before SkyRL starts: s3:// prefixes are copied to
`<digest>/` (through `<digest>.partial/`, renamed when whole), pinned hub models are downloaded with
huggingface_hub's `snapshot_download(revision=...)` into a hub cache there, whose snapshot directory is per commit.
`<digest>.staged.json` is written last (atomically) and names the staged directory: with it, a resumed attempt
reuses the copy without touching S3 or the hub; without it, whatever is there is half-staged and staged again.
Other models (paths, unpinned hub ids) pass through unchanged.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from mmrl_api.spec import ModelSpec
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import storage
from mmrl_trainer.checkpoint import atomic_write_text
from mmrl_trainer.errors import InvalidConfig, InvalidInput

MODELS_DIR = "models"
HUB_CACHE = "hub"


def needs_staging(model: ModelSpec) -> bool:
    return storage.is_s3(model.name) or (model.revision is not None and _hub_id(model.name) is not None)


def _hub_id(name: str) -> str | None:
    """`org/name` for hub models (`hf://org/name` or a bare id), None for paths and other URIs."""
    if name.startswith("hf://"):
        return name.removeprefix("hf://")
    return None if name.startswith("/") or "://" in name else name


def source_of(model: ModelSpec) -> str:
    """What is staged: the URI, with the pinned revision of a hub model."""
    return f"{model.name}@{model.revision}" if _hub_id(model.name) and model.revision else model.name


def staged_path(checkpoint_dir: str | Path, model: ModelSpec) -> Path | None:
    """The staged directory recorded by a complete staging of this model, or None."""
    marker = _marker(Path(checkpoint_dir) / MODELS_DIR, model)
    try:
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    path = Path(record.get("path", ""))
    return path if record.get("source") == source_of(model) and (path / "config.json").is_file() else None


def _marker(root: Path, model: ModelSpec) -> Path:
    return root / f"{_digest(model)}.staged.json"


def _digest(model: ModelSpec) -> str:
    return hashlib.sha256(source_of(model).encode()).hexdigest()[:16]


def model_path(cfg: TrainerConfig) -> str:
    """The model path SkyRL gets for this job: staged (once per job) when the model needs it."""
    model = cfg.model
    if not needs_staging(model):
        return _hub_id(model.name) or model.name
    if storage.is_s3(cfg.checkpoint.dir):
        raise InvalidConfig(
            f"spec.model: {source_of(model)!r} is staged to a volume every Ray pod mounts before training, and this "
            "job keeps its checkpoints on S3: use spec.checkpoint.pvc (a shared volume such as FSx), a pvc:// model, "
            "or an unpinned hub id"
        )
    found = staged_path(cfg.checkpoint.dir, model)
    return str(found if found is not None else stage(model, Path(cfg.checkpoint.dir) / MODELS_DIR))


def stage(model: ModelSpec, root: Path) -> Path:
    """Copy the model under `root` and record it; returns the directory SkyRL reads."""
    root.mkdir(parents=True, exist_ok=True)
    if storage.is_s3(model.name):
        final = root / _digest(model)
        partial = root / f"{_digest(model)}.partial"
        for leftover in (partial, final):  # no marker: a crashed earlier staging
            shutil.rmtree(leftover, ignore_errors=True)
        if storage.download_tree(model.name, partial) == 0:
            raise InvalidInput(f"spec.model.name {model.name!r}: no files under this S3 prefix")
        partial.rename(final)
    else:
        final = _hub_snapshot(model, root / HUB_CACHE)
    if not (final / "config.json").is_file():
        raise InvalidInput(f"spec.model.name {source_of(model)!r}: the staged model has no config.json")
    atomic_write_text(_marker(root, model), json.dumps({"source": source_of(model), "path": str(final)}))
    return final


def _hub_snapshot(model: ModelSpec, cache: Path) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    repo = _hub_id(model.name)
    assert repo is not None
    try:
        return Path(snapshot_download(repo, revision=model.revision, cache_dir=cache))
    except RevisionNotFoundError as err:
        raise InvalidInput(f"spec.model.revision {model.revision!r}: {repo} has no such revision ({err})") from err
    except RepositoryNotFoundError as err:
        raise InvalidInput(f"spec.model.name {model.name!r}: no such model on the hub ({err})") from err
