"""The resume marker is repaired before SkyRL reads it: SkyRL writes it with a plain open-and-write and reads it with
`int(...)`, so a node lost between the truncate and the write would fail every later attempt. The marker is
rewritten atomically to the newest complete step; with no complete step an unusable marker is set aside (kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends.skyrl import repair_resume_marker
from mmrl_trainer.errors import InvalidInput
from mmrl_trainer.world_size import check_resume_world_size
from tests.unit.trainer.skyrl_job import skyrl_config


def skyrl_save(root: Path, step: int) -> Path:
    """A step as SkyRL's save_checkpoints leaves it (no manifest), then its marker written as SkyRL writes it."""
    path = root / f"global_step_{step}"
    (path / "policy").mkdir(parents=True)
    (path / "policy" / "model_world_size_8_rank_0.pt").write_bytes(b"shard")
    (path / "trainer_state.pt").write_bytes(b"state")
    (root / ckpt.MARKER).write_text(str(step))
    return path


def listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("torn", ["", "\n", "4\x00", "\x00\x00", "garbage"])
def test_a_torn_marker_is_rewritten_to_the_step_below_the_save_that_was_cut_short(tmp_path: Path, torn: str) -> None:
    for step in (2, 4, 6):
        skyrl_save(tmp_path, step)
    (tmp_path / ckpt.MARKER).write_text(torn)  # lost between SkyRL's truncate and its write of step 6
    steps = listing(tmp_path)

    repair = ckpt.repair_marker(tmp_path)

    assert repair == ckpt.MarkerRepair(torn, 4)
    assert (tmp_path / ckpt.MARKER).read_text() == "4\n" and int((tmp_path / ckpt.MARKER).read_text().strip()) == 4
    # Written through a temp file and renamed: nothing else appeared, and no step was touched.
    assert {k: v for k, v in listing(tmp_path).items() if k != ckpt.MARKER} == {
        k: v for k, v in steps.items() if k != ckpt.MARKER
    }
    assert ckpt.repair_marker(tmp_path) is None  # repaired once; a sound marker is left alone


def test_a_missing_marker_beside_several_steps_is_written_back(tmp_path: Path) -> None:
    for step in (3, 6):
        skyrl_save(tmp_path, step)
    (tmp_path / ckpt.MARKER).unlink()
    assert ckpt.repair_marker(tmp_path) == ckpt.MarkerRepair(None, 3)
    assert ckpt.read_marker(tmp_path) == 3


def test_a_marker_naming_a_missing_step_is_lowered_to_the_newest_complete_one(tmp_path: Path) -> None:
    skyrl_save(tmp_path, 5)
    (tmp_path / ckpt.MARKER).write_text("10")  # step 10's directory is gone
    assert ckpt.repair_marker(tmp_path) == ckpt.MarkerRepair("10", 5)
    assert ckpt.read_marker(tmp_path) == 5


def test_a_marker_naming_a_damaged_local_step_is_lowered_past_it(tmp_path: Path) -> None:
    for step in (2, 4):
        path = ckpt.begin_step(tmp_path, step)
        (path / "adapter.bin").write_bytes(b"w" * 32)
        ckpt.commit_step(tmp_path, step)
    (tmp_path / "global_step_4" / "adapter.bin").write_bytes(b"short")  # its manifest no longer matches
    assert ckpt.repair_marker(tmp_path) == ckpt.MarkerRepair("4\n", 2)
    assert ckpt.read_marker(tmp_path) == 2


def test_a_sound_marker_and_a_fresh_directory_are_left_alone(tmp_path: Path) -> None:
    assert ckpt.repair_marker(tmp_path) is None
    skyrl_save(tmp_path, 2)
    half = tmp_path / "global_step_4"
    half.mkdir()  # a save in progress, newer than the marker
    before = (tmp_path / ckpt.MARKER).stat()
    assert ckpt.repair_marker(tmp_path) is None
    after = (tmp_path / ckpt.MARKER).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_the_torn_marker_of_the_first_save_is_set_aside_and_kept(tmp_path: Path) -> None:
    skyrl_save(tmp_path, 2)
    (tmp_path / ckpt.MARKER).write_text("")  # the job's first save: nothing is provably complete
    repair = ckpt.repair_marker(tmp_path)
    assert repair is not None and (repair.found, repair.step) == ("", None)
    assert not (tmp_path / ckpt.MARKER).exists()  # SkyRL starts from step 0, as before any checkpoint
    assert repair.set_aside is not None and repair.set_aside.parent == tmp_path and repair.set_aside.read_text() == ""
    assert sorted(ckpt.step_dirs(tmp_path)) == [2]


def test_no_provable_step_among_several_is_refused_and_nothing_is_touched(tmp_path: Path) -> None:
    for step in (10, 20):
        skyrl_save(tmp_path, step)
    (tmp_path / ckpt.MARKER).write_text("5")  # below every step: not something a crash leaves
    before = listing(tmp_path)
    with pytest.raises(InvalidInput, match=r"spec.checkpoint: .*reads '5'.*\[10, 20\]"):
        ckpt.repair_marker(tmp_path)
    assert listing(tmp_path) == before


def config(job_dir: Path, **top: object) -> TrainerConfig:
    return TrainerConfig.model_validate(skyrl_config(str(job_dir), **top))


def test_after_the_skyrl_drivers_repair_the_world_size_check_sees_the_step_skyrl_loads(tmp_path: Path) -> None:
    for step in (1, 2):
        skyrl_save(tmp_path, step)
    (tmp_path / ckpt.MARKER).write_text("")
    assert check_resume_world_size(config(tmp_path)) is None  # unrepaired: SkyRL would start over or fail

    assert repair_resume_marker(config(tmp_path)) == ckpt.MarkerRepair("", 1)
    saved = check_resume_world_size(config(tmp_path))
    assert saved is not None and (saved.step, saved.world_size) == (1, 8)


def test_the_skyrl_driver_leaves_the_marker_of_a_fresh_start_or_an_s3_job_alone(tmp_path: Path) -> None:
    skyrl_save(tmp_path, 1)
    skyrl_save(tmp_path, 2)
    (tmp_path / ckpt.MARKER).write_text("")
    before = listing(tmp_path)
    assert repair_resume_marker(config(tmp_path, resume="none")) is None
    assert repair_resume_marker(config(Path("/unused"), checkpoint={"dir": "s3://bucket/job"})) is None
    assert listing(tmp_path) == before
