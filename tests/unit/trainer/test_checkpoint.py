"""The checkpoint contract: complete only when the marker (written last, atomically) covers a sound step."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mmrl_trainer import checkpoint as ckpt


def save(root: Path, step: int, *, keep: int | None = None, payload: bytes = b"w" * 64) -> Path:
    path = ckpt.begin_step(root, step)
    (path / "policy").mkdir()
    (path / "policy" / "adapter_model.safetensors").write_bytes(payload)
    ckpt.commit_step(root, step, keep=keep)
    return path


def test_marker_is_written_last_and_names_the_newest_step(tmp_path: Path) -> None:
    save(tmp_path, 5)
    save(tmp_path, 10)
    assert (tmp_path / ckpt.MARKER).read_text().strip() == "10"
    latest = ckpt.latest_complete(tmp_path)
    assert latest is not None and latest.step == 10 and latest.path == tmp_path / "global_step_10"
    files = json.loads((latest.path / ckpt.MANIFEST).read_text())["files"]
    assert files == {"policy/adapter_model.safetensors": {"size": 64, "sha256": hashlib.sha256(b"w" * 64).hexdigest()}}


def test_step_newer_than_marker_is_half_written_and_ignored(tmp_path: Path) -> None:
    save(tmp_path, 5)
    half = ckpt.begin_step(tmp_path, 10)
    (half / "policy").mkdir()
    (half / "policy" / "optimizer.pt").write_bytes(b"partial")
    latest = ckpt.latest_complete(tmp_path)
    assert latest is not None and latest.step == 5


def test_step_sealed_but_marker_not_yet_advanced_is_ignored(tmp_path: Path) -> None:
    save(tmp_path, 5)
    path = ckpt.begin_step(tmp_path, 10)
    ckpt.write_manifest(path, 10)  # crash between manifest and marker
    assert ckpt.latest_complete(tmp_path).step == 5


def test_marker_pointing_at_damaged_step_falls_back_to_older_complete(tmp_path: Path) -> None:
    save(tmp_path, 5)
    newest = save(tmp_path, 10)
    (newest / "policy" / "adapter_model.safetensors").write_bytes(b"truncated")
    assert ckpt.latest_complete(tmp_path).step == 5
    (newest / "policy" / "adapter_model.safetensors").unlink()
    assert ckpt.latest_complete(tmp_path).step == 5


def test_marker_pointing_at_missing_step_falls_back(tmp_path: Path) -> None:
    save(tmp_path, 5)
    save(tmp_path, 10)
    import shutil

    shutil.rmtree(tmp_path / "global_step_10")
    assert ckpt.latest_complete(tmp_path).step == 5


def test_no_marker_means_nothing_is_complete(tmp_path: Path) -> None:
    save(tmp_path, 5)
    (tmp_path / ckpt.MARKER).unlink()
    assert ckpt.latest_complete(tmp_path) is None
    assert ckpt.latest_complete(tmp_path / "missing") is None


def test_an_unreadable_marker_seals_every_step_but_the_newest(tmp_path: Path) -> None:
    for step in (2, 4, 6):
        save(tmp_path, step)
    (tmp_path / ckpt.MARKER).write_text("")  # torn: the save of step 6 may have been cut short
    assert ckpt.sealed_step(tmp_path) == 4
    assert [c.step for c in ckpt.complete_checkpoints(tmp_path)] == [2, 4]
    (tmp_path / "global_step_4" / "policy" / "adapter_model.safetensors").write_bytes(b"")  # and 4 is damaged
    assert ckpt.latest_complete(tmp_path).step == 2


def test_steps_in_skyrls_layout_without_manifest_are_complete_up_to_the_marker(tmp_path: Path) -> None:
    for step in (5, 10, 15):
        (tmp_path / f"global_step_{step}" / "policy").mkdir(parents=True)
        (tmp_path / f"global_step_{step}" / "trainer_state.pt").write_bytes(b"s")
    (tmp_path / ckpt.MARKER).write_text("10\n")
    assert [c.step for c in ckpt.complete_checkpoints(tmp_path)] == [5, 10]


def test_rotation_keeps_the_newest_k_complete_and_never_touches_half_written(tmp_path: Path) -> None:
    for step in (2, 4, 6):
        save(tmp_path, step)
    half = ckpt.begin_step(tmp_path, 8)
    save(tmp_path, 7, keep=2)
    assert sorted(ckpt.step_dirs(tmp_path)) == [6, 7, 8]
    assert half.exists()
    assert [c.step for c in ckpt.complete_checkpoints(tmp_path)] == [6, 7]


def test_resaving_a_step_replaces_leftovers_of_a_crashed_save(tmp_path: Path) -> None:
    stale = ckpt.begin_step(tmp_path, 3)
    (stale / "junk.bin").write_bytes(b"x")
    path = save(tmp_path, 3)
    assert not (path / "junk.bin").exists()
    assert ckpt.latest_complete(tmp_path).step == 3


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    ckpt.atomic_write_text(tmp_path / ckpt.MARKER, "1\n")
    ckpt.atomic_write_text(tmp_path / ckpt.MARKER, "2\n")
    assert [p.name for p in tmp_path.iterdir()] == [ckpt.MARKER]
    assert ckpt.read_marker(tmp_path) == 2


def test_s3_roots_are_refused_by_the_local_contract_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match=r"s3://.*backend=skyrl"):
        ckpt.latest_complete("s3://bucket/ckpt")


# Tears a crash can leave under a valid marker (issue #45 item 2): each resumes from the previous complete step, and
# says why the newer one was passed over.


def two_steps(root: Path) -> Path:
    save(root, 5, payload=b"a" * 64)
    newest = save(root, 10, payload=b"b" * 64)
    (newest / "policy" / "optimizer.pt").write_bytes(b"o" * 32)  # a second file, recorded by a re-seal
    ckpt.write_manifest(newest, 10)
    return newest


def test_a_truncated_file_under_a_valid_marker_is_passed_over(tmp_path: Path) -> None:
    newest = two_steps(tmp_path)
    (newest / "policy" / "optimizer.pt").write_bytes(b"o" * 7)
    latest, skipped = ckpt.resume_point(tmp_path, required=True)
    assert latest is not None and latest.step == 5 == ckpt.latest_complete(tmp_path, required=True).step
    assert skipped == ["global_step_10/policy/optimizer.pt has 7 bytes, its manifest 32"]


def test_one_corrupt_byte_of_the_same_size_is_passed_over(tmp_path: Path) -> None:
    newest = two_steps(tmp_path)
    weights = newest / "policy" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[17] ^= 0x01
    weights.write_bytes(bytes(data))
    latest, skipped = ckpt.resume_point(tmp_path, required=True)
    assert latest is not None and latest.step == 5 == ckpt.latest_complete(tmp_path, required=True).step
    assert "does not have the sha256 its manifest records" in skipped[0]


def test_a_deleted_manifest_is_passed_over_where_manifests_are_required(tmp_path: Path) -> None:
    newest = two_steps(tmp_path)
    (newest / ckpt.MANIFEST).unlink()
    assert ckpt.latest_complete(tmp_path, required=True).step == 5
    assert ckpt.resume_point(tmp_path, required=True)[1] == [
        f"global_step_10 has no {ckpt.MANIFEST}: its save was cut short"
    ]
    assert ckpt.latest_complete(tmp_path).step == 10  # SkyRL's steps carry none: the marker is their guarantee


def test_a_manifest_of_an_earlier_trainer_is_checked_for_sizes(tmp_path: Path) -> None:
    newest = two_steps(tmp_path)
    sizes = {"policy/adapter_model.safetensors": 64, "policy/optimizer.pt": 32}
    (newest / ckpt.MANIFEST).write_text(json.dumps({"step": 10, "files": sizes}))
    assert ckpt.latest_complete(tmp_path, required=True).step == 10
    (newest / "policy" / "optimizer.pt").write_bytes(b"o")
    assert ckpt.latest_complete(tmp_path, required=True).step == 5


WRITER = """
import os, sys, time
from pathlib import Path
from mmrl_trainer import checkpoint as ckpt
root = Path(sys.argv[1])
path = ckpt.begin_step(root, 10)
(path / "adapter_model.safetensors").write_bytes(b"b" * 4096)
print("between files", flush=True)
time.sleep(60)
(path / "optimizer.pt").write_bytes(b"o" * 4096)
ckpt.commit_step(root, 10)
"""


def test_a_writer_killed_between_files_leaves_the_previous_step(tmp_path: Path) -> None:
    save(tmp_path, 5)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "between files"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    assert sorted(ckpt.step_dirs(tmp_path)) == [5, 10]  # the half-written step is there, and never taken
    latest, skipped = ckpt.resume_point(tmp_path, required=True)
    assert latest is not None and latest.step == 5 and skipped == []
    assert ckpt.latest_complete(tmp_path, required=True).step == 5
