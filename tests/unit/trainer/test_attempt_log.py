"""Each attempt's trainer log lands in <jobDir>/logs/attempt-N.log, and the head pod's trainer-log container prints
every attempt's, prefixed, in attempt order; `mmrl logs` picks one attempt back out."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

from mmrl_operator.cli.logs import pick, stream_lines
from mmrl_trainer.attempt_log import follow

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
from mmrl_trainer import attempt_log
print(attempt_log.start(sys.argv[1], int(sys.argv[2])))
logging.getLogger("mmrl_trainer").info("step 1 reward=0.5")
print("a plain print")
print("mmrl-trainer error: boom", file=sys.stderr)
"""


def run_trainer(job_dir: Path, attempt: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(job_dir), str(attempt)], capture_output=True, text=True, check=True
    )


def test_the_trainers_stdout_stderr_and_log_lines_go_to_the_attempts_file_too(tmp_path: Path) -> None:
    done = run_trainer(tmp_path, 2)
    path = tmp_path / "logs" / "attempt-2.log"
    assert done.stdout.splitlines()[0] == str(path)
    assert "INFO step 1 reward=0.5" in done.stderr and "a plain print" in done.stdout  # still on the console
    written = path.read_text()
    for line in ("INFO step 1 reward=0.5", "a plain print", "mmrl-trainer error: boom"):
        assert line in written
    run_trainer(tmp_path, 2)  # a second trainer for the same attempt appends
    assert path.read_text().count("a plain print") == 2


def test_follow_prints_every_attempt_in_order_and_holds_back_an_unfinished_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "attempt-10.log").write_text("ten\n")
    (logs / "attempt-2.log").write_text("two a\ntwo b\n")
    (logs / "attempt-1.log").write_text("one\nhalf")
    (logs / "infra-2026.log").write_text("SkyRL's own\n")
    out, passes = io.StringIO(), []

    def stop() -> bool:
        passes.append(1)
        if len(passes) == 1:
            with open(logs / "attempt-1.log", "a") as fh:
                fh.write(" done\n")
        return len(passes) == 2

    follow(logs, out, poll=0, stop=stop)
    assert out.getvalue().splitlines() == [
        "[attempt 1] one",
        "[attempt 2] two a",
        "[attempt 2] two b",
        "[attempt 10] ten",
        "[attempt 1] half done",
    ]
    text = out.getvalue()
    assert list(pick(text.splitlines(), 1)) == ["one", "half done"]
    assert list(pick(["noise", *text.splitlines()], None)) == text.splitlines()  # other lines dropped


def test_a_followed_pod_log_is_cut_into_whole_lines() -> None:
    assert list(stream_lines([b"[attempt 1] a", b"b\n[attempt", b" 2] c\n", b"tail"])) == [
        "[attempt 1] ab",
        "[attempt 2] c",
        "tail",
    ]


def test_no_file_for_an_s3_job_directory(tmp_path: Path) -> None:
    from mmrl_trainer.attempt_log import start

    before = sys.stdout
    assert start("s3://bucket/jobs/team/geo-1", 1) is None and sys.stdout is before
    logging.getLogger(__name__).info("nothing to tee")
