"""`python -m mmrl_trainer selftest`: the image self-test trains, checkpoints, resumes, exports and checks the
adapter on the CPU, and a broken piece turns its row to FAIL and the exit code non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmrl_api.contract import EXIT_BAD_CONFIG, EXIT_FAILED, EXIT_OK, error_line
from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.__main__ import main
from mmrl_trainer.adapter import WEIGHTS
from mmrl_trainer.selftest import JOB_DIR, exit_code, run_selftest

pytestmark = pytest.mark.trainer
ROWS = ["workdir", "hardware", "tiny model", "train + checkpoint", "resume", "export", "adapter check"]


def table_rows(out: str) -> dict[str, str]:
    """CHECK -> RESULT from the printed table."""
    rows = {}
    for line in out.splitlines():
        for name in ROWS:
            if line.startswith(name + "  "):
                rows[name] = line[len(name) :].split()[0]
    return rows


def test_selftest_passes_end_to_end_on_cpu_and_prints_the_table(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["selftest", "--workdir", str(tmp_path), "--steps", "2"]) == EXIT_OK
    out = capsys.readouterr().out
    assert table_rows(out) == dict.fromkeys(ROWS, "PASS")
    assert "self-test PASS" in out and "backend local" in out
    job = tmp_path / JOB_DIR
    assert ckpt.latest_complete(job).step == 2  # trained past the checkpoint it resumed from
    assert (job / "adapter" / WEIGHTS).is_file()


def test_a_corrupt_adapter_fails_the_adapter_check_row(tiny_model: Path, tmp_path: Path) -> None:
    def truncate(adapter: Path) -> None:  # a copy cut short: the safetensors header is gone
        weights = adapter / WEIGHTS
        weights.write_bytes(weights.read_bytes()[:4])

    report = run_selftest(2, tmp_path, "local", after_export=truncate)
    results = {c.name: c.status for c in report.checks}
    assert results == {**dict.fromkeys(ROWS[:-1], "PASS"), "adapter check": "FAIL"}
    assert WEIGHTS in report.checks[-1].detail
    assert exit_code(report) == EXIT_FAILED


def test_an_unwritable_workdir_fails_first_and_skips_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert main(["selftest", "--workdir", str(blocker / "work"), "--json"]) == EXIT_FAILED
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["passed"] is False
    assert [(c["name"], c["status"]) for c in report["checks"]] == [
        ("workdir", "FAIL"),
        *((name, "SKIP") for name in ROWS[1:]),
    ]
    assert captured.err.strip().splitlines()[-1].startswith(error_line("self-test failed at workdir: "))


def test_fewer_than_two_steps_is_a_bad_command_line(tmp_path: Path) -> None:
    assert main(["selftest", "--steps", "1", "--workdir", str(tmp_path)]) == EXIT_BAD_CONFIG
    assert main(["selftest", "--backend", "tpu"]) == EXIT_BAD_CONFIG
    assert not list(tmp_path.iterdir())


def test_selftest_with_backend_skyrl_and_no_gpu_fails_the_hardware_row_before_any_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # not a RayJob driver: no Ray cluster to offer GPUs
    assert main(["selftest", "--backend", "skyrl", "--workdir", str(tmp_path), "--json"]) == EXIT_FAILED
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert [(c["name"], c["status"]) for c in checks[:3]] == [
        ("workdir", "PASS"),
        ("hardware", "FAIL"),
        ("tiny model", "SKIP"),
    ]
    assert "--backend skyrl needs" in checks[1]["detail"]
    assert not (tmp_path / JOB_DIR).exists()
