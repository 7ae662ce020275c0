"""The checkpoint contract shared by both backends and read by the operator.

Layout (SkyRL's): `<dir>/global_step_N/` holds one step's state, and `<dir>/latest_ckpt_global_step.txt` holds N.
The marker is written LAST and atomically (temp file, fsync, os.replace, fsync of the directory), so a crash at any
instant leaves either the old or the new marker. Completeness is judged as follows: a step is complete when
(1) N <= the sealed step, (2) its directory exists, and (3) when it carries a `MANIFEST.json` (the local backend
always writes one, just before the marker, and requires it) every file it lists exists with the recorded size and
sha256. Every file is fsync'd before the manifest names it, and the manifest before the marker, so a node lost at any
instant leaves no step that passes these checks with a torn file. The sealed step is the
marker's; when the marker is missing or unreadable it is the step below the newest step directory, because saves run
one at a time and write the marker last, so only the newest directory can be a save that was cut short. SkyRL's
steps carry no manifest; for them rule (1) is the guarantee, because SkyRL only advances the marker after a step is
written. A step directory newer than the marker is a half-written save and is ignored; a marker that names a missing
or damaged step falls back to the newest older complete one. Rotation deletes only complete steps older than the
newest K. This module handles local and mounted paths (PVC/FSx); s3:// directories are passed through to SkyRL,
which writes them itself, and are rejected here with a message saying so.

SkyRL writes its marker with a plain open-and-write and reads it with `int(...)` (skyrl 0.3.0 train/trainer.py:
save_checkpoints, load_checkpoints), so a node lost between the truncate and the write leaves an empty marker that
fails every later resume. `repair_marker` makes the marker name the newest complete step before SkyRL reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from mmrl_trainer.errors import InvalidInput

MARKER = "latest_ckpt_global_step.txt"
MANIFEST = "MANIFEST.json"
STEP_PREFIX = "global_step_"
_STEP_RE = re.compile(rf"^{STEP_PREFIX}(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path
    time: str | None = None


def local_dir(uri: str | Path) -> Path:
    """A checkpoint root as a local path; s3:// is the SkyRL backend's job (fsspec is not in the local image)."""
    text = str(uri)
    if text.startswith("s3://"):
        raise InvalidInput(
            f"checkpoint.dir {text!r}: the local backend writes checkpoints to local or mounted paths only; "
            "use a PVC path or backend=skyrl for s3:// checkpoint directories"
        )
    return Path(text.removeprefix("file://"))


def step_dir(root: str | Path, step: int) -> Path:
    return local_dir(root) / f"{STEP_PREFIX}{step}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` so readers see the old content or the new, never a torn file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def read_marker(root: str | Path) -> int | None:
    marker = local_dir(root) / MARKER
    try:
        return int(marker.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def step_dirs(root: str | Path) -> dict[int, Path]:
    base = local_dir(root)
    if not base.is_dir():
        return {}
    found = {}
    for child in base.iterdir():
        match = _STEP_RE.match(child.name)
        if match and child.is_dir():
            found[int(match.group(1))] = child
    return found


CHUNK = 1 << 20


def _sha256(path: Path, sync: bool = False) -> str:
    """The file's sha256; with `sync`, fsync'd first (a step's bytes reach the disk before the manifest names them)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        if sync:
            os.fsync(fh.fileno())
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(path: Path, step: int) -> None:
    """Record every file of a step (relative path -> size and sha256), each fsync'd first, with the directories that
    hold them; written after the files, before the marker. A crash before the manifest leaves a step without one,
    which a resume that requires manifests never takes."""
    found = [p for p in sorted(path.rglob("*")) if p.is_file() and p.name != MANIFEST]
    files = {str(p.relative_to(path)): {"size": p.stat().st_size, "sha256": _sha256(p, sync=True)} for p in found}
    for d in sorted({path, *(p.parent for p in found)}, reverse=True):
        _fsync_dir(d)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write_text(path / MANIFEST, json.dumps({"step": step, "time": now, "files": files}, indent=1))


def manifest_problem(path: Path, required: bool = False) -> str | None:
    """Why the step's files are not the ones its manifest records (None: they are). A step without a manifest is
    sound unless `required` (the local backend always writes one; SkyRL's steps carry none). Manifests of earlier
    trainers record sizes only, and are checked for those."""
    manifest = path / MANIFEST
    if not manifest.exists():
        return f"{path.name} has no {MANIFEST}: its save was cut short" if required else None
    try:
        files = json.loads(manifest.read_text())["files"]
        for rel, entry in files.items():
            size, sha = (entry, None) if isinstance(entry, int) else (entry["size"], entry["sha256"])
            found = path / rel
            if not found.is_file():
                return f"{path.name}/{rel} is missing"
            if found.stat().st_size != size:
                return f"{path.name}/{rel} has {found.stat().st_size} bytes, its manifest {size}"
            if sha is not None and _sha256(found) != sha:
                return f"{path.name}/{rel} does not have the sha256 its manifest records"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{path.name}/{MANIFEST} is unreadable: {err}"
    return None


def manifest_ok(path: Path, required: bool = False) -> bool:
    """True when the step's files are those its manifest records (see manifest_problem)."""
    return manifest_problem(path, required) is None


def _time_of(path: Path) -> str | None:
    try:
        return json.loads((path / MANIFEST).read_text()).get("time")
    except (OSError, ValueError):
        return None


def sealed_step(root: str | Path) -> int | None:
    """The newest step a finished save sealed: the marker's, else the one below the newest step directory."""
    marker = read_marker(root)
    if marker is not None:
        return marker
    steps = sorted(step_dirs(root))
    return steps[-2] if len(steps) > 1 else None


def complete_checkpoints(root: str | Path, required: bool = False) -> list[Checkpoint]:
    """All complete steps, oldest first (see the module docstring for the rules); `required`: a step without a
    manifest is not complete (the local backend's)."""
    sealed = sealed_step(root)
    if sealed is None:
        return []
    return [
        Checkpoint(step, path, _time_of(path))
        for step, path in sorted(step_dirs(root).items())
        if step <= sealed and manifest_ok(path, required)
    ]


def latest_complete(root: str | Path, required: bool = False) -> Checkpoint | None:
    complete = complete_checkpoints(root, required)
    return complete[-1] if complete else None


def resume_point(root: str | Path, required: bool = False) -> tuple[Checkpoint | None, list[str]]:
    """The step a resume takes (the newest complete one) and why each sealed step newer than it is not taken, newest
    first. Steps are checked newest first and the walk stops at the first sound one, so older steps are not read."""
    sealed = sealed_step(root)
    if sealed is None:
        return None, []
    skipped: list[str] = []
    for step, path in sorted(step_dirs(root).items(), reverse=True):
        if step > sealed:
            continue
        why = manifest_problem(path, required)
        if why is None:
            return Checkpoint(step, path, _time_of(path)), skipped
        skipped.append(why)
    return None, skipped


def begin_step(root: str | Path, step: int) -> Path:
    """A clean directory for `step`; leftovers of an earlier crashed save of the same step are removed."""
    path = step_dir(root, step)
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()
    return path


def commit_step(root: str | Path, step: int, keep: int | None = None) -> Checkpoint:
    """Seal a fully written step: manifest, then the marker (last), then rotation of old complete steps."""
    path = step_dir(root, step)
    write_manifest(path, step)
    _fsync_dir(path)
    atomic_write_text(local_dir(root) / MARKER, f"{step}\n")
    if keep is not None:
        rotate(root, keep)
    return Checkpoint(step, path, _time_of(path))


def rotate(root: str | Path, keep: int) -> list[int]:
    """Delete complete steps older than the newest `keep`; half-written, damaged and newer dirs are never touched.
    Only the local backend rotates here, and its steps always carry a manifest."""
    complete = complete_checkpoints(root, required=True)
    doomed = complete[: max(0, len(complete) - max(1, keep))]
    for ckpt in doomed:
        shutil.rmtree(ckpt.path, ignore_errors=True)
    return [c.step for c in doomed]


@dataclass(frozen=True)
class MarkerRepair:
    found: str | None
    """The marker's text before the repair; None when there was no marker."""
    step: int | None
    """The step the marker names now; None when it was set aside and the attempt starts from step 0."""
    set_aside: Path | None = None
    """Where an unusable marker was moved (kept, never deleted)."""


def repair_marker(root: str | Path) -> MarkerRepair | None:
    """Make the marker name the newest complete step before a resume reads it; None when it already does, or when
    there is neither a marker nor a complete step (a fresh start).

    - Complete steps exist and the marker is missing, empty, garbled or names a step that is not complete (a
      missing or damaged directory): it is rewritten atomically to the newest complete step. Resuming the marker's
      own step would fail (no such directory) or load a damaged save; the rules above already say which one is sound.
    - No complete step, an unusable marker, and at most one step directory (the realistic case: the marker of the
      job's first save torn, that save unproven): the marker is moved aside, so SkyRL starts from step 0, as it does
      before any checkpoint, and rewrites that directory when it saves the step again.
    - No complete step and several step directories: a crash cannot leave that, and starting over beside them would
      let SkyRL's rotation delete them; InvalidInput names the marker and the steps, and nothing is touched.
    """
    base = local_dir(root)
    marker = base / MARKER
    try:
        found: str | None = marker.read_bytes().decode(errors="replace")
    except FileNotFoundError:
        found = None
    latest = latest_complete(base)
    if latest is not None:
        if found is not None and read_marker(base) == latest.step:
            return None
        atomic_write_text(marker, f"{latest.step}\n")
        return MarkerRepair(found, latest.step)
    if found is None:
        return None
    steps = sorted(step_dirs(base))
    if len(steps) > 1:
        raise InvalidInput(
            f"spec.checkpoint: {marker} reads {found[:40]!r} and none of the steps {steps} under it can be shown "
            f"complete; write the step to resume from into {MARKER}, or move the step directories away to start anew"
        )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = marker.with_name(f"{MARKER}.unusable-{stamp}-{os.getpid()}")
    os.replace(marker, aside)
    _fsync_dir(base)
    return MarkerRepair(found, None, aside)
