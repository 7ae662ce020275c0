"""The process-level contract between the operator and the trainer: how a RayJob starts the trainer, what its
exit codes mean, and how the trainer's last error reaches the job's status.

The operator builds the RayJob entrypoint with `entrypoint_command` and reads failures back with
`fatal_reason` and `last_error_line`; the trainer's `__main__` parses the same argv and prints its error with
`error_line`. Ray (and so KubeRay's RayJob `status.message`) reports a failed entrypoint as "Job entrypoint command
failed with exit code N, last available logs …" followed by the last lines of the driver's output, which is why
the trainer's error line is always the last line it prints. No torch, kopf or kubernetes here: both sides import it.
"""

from __future__ import annotations

import hashlib
import re
import shlex

MODULE = "mmrl_trainer"
SELFTEST = "selftest"
"""First argv word that runs the image self-test (`python -m mmrl_trainer selftest`) instead of training."""
EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG, EXIT_BAD_INPUT = 0, 1, 2, 3
# Exit codes that mean "retrying will not help": the job fails at once with this reason, spending no budget.
FATAL_EXIT_REASONS = {EXIT_BAD_CONFIG: "InvalidConfig", EXIT_BAD_INPUT: "InvalidInput"}
ERROR_PREFIX = "mmrl-trainer error: "

_RAY_EXIT_CODE = re.compile(r"failed with exit code (-?\d+)")


def entrypoint_argv(
    config_file: str, attempt: int, config_sha256: str | None = None, *, python: str = "python"
) -> list[str]:
    """argv of one attempt: the trainer module, the mounted TrainerConfig file, the attempt number and the digest of
    the config this attempt was created for (the trainer waits until the mounted file has it)."""
    argv = [python, "-m", MODULE, "--config", config_file, "--attempt", str(attempt)]
    return [*argv, "--config-sha256", config_sha256] if config_sha256 else argv


def entrypoint_command(config_file: str, attempt: int, config_sha256: str | None = None) -> str:
    """The shell command string a RayJob's `spec.entrypoint` carries."""
    return shlex.join(entrypoint_argv(config_file, attempt, config_sha256))


def selftest_argv(backend: str, workdir: str | None, steps: int = 2, *, python: str = "python") -> list[str]:
    """argv of a job's preflight: the image self-test with the job's backend, in `workdir` when given (else a
    temporary directory). The backend is explicit because the driver runs on the Ray head, which has no GPU."""
    argv = [python, "-m", MODULE, SELFTEST, "--backend", backend, "--steps", str(steps)]
    return [*argv, "--workdir", workdir] if workdir else argv


def selftest_command(backend: str, workdir: str | None) -> str:
    """The shell command string of a preflight RayJob's `spec.entrypoint`."""
    return shlex.join(selftest_argv(backend, workdir))


def config_digest(text: str) -> str:
    """sha256 of the TrainerConfig file's bytes, as the ConfigMap carries them."""
    return hashlib.sha256(text.encode()).hexdigest()


def error_line(message: str) -> str:
    """The one line the trainer prints last when it fails (newlines folded so it stays one line)."""
    return ERROR_PREFIX + " ".join(message.split())


def exit_code_from_ray_message(message: str) -> int | None:
    """The entrypoint's exit code from Ray's job failure message, when it names one."""
    found = _RAY_EXIT_CODE.search(message or "")
    return int(found.group(1)) if found else None


def last_error_line(message: str) -> str | None:
    """The trainer's last `error_line` inside a log tail or a Ray failure message (prefix removed)."""
    lines = [ln for ln in (message or "").splitlines() if ERROR_PREFIX in ln]
    return lines[-1].split(ERROR_PREFIX, 1)[1].strip() if lines else None


def fatal_reason(message: str) -> str | None:
    """InvalidConfig / InvalidInput when a failed attempt's message says the trainer exited 2 / 3, else None."""
    code = exit_code_from_ray_message(message)
    return FATAL_EXIT_REASONS.get(code) if code is not None else None


# The trainer's per-attempt log (mmrl_trainer.attempt_log): `<jobDir>/logs/attempt-<N>.log`, printed by the head pod's
# `trainer-log` container with every line prefixed `[attempt N] `, which `mmrl logs` reads through pods/log.
ATTEMPT_LOG_CONTAINER = "trainer-log"
ATTEMPT_LOG_DIR = "logs"
_ATTEMPT_LINE = re.compile(r"^\[attempt (\d+)\] ?(.*)$")


def attempt_log_line(attempt: int, line: str) -> str:
    return f"[attempt {attempt}] {line}"


def attempt_of_log_line(line: str) -> tuple[int, str] | None:
    """(attempt, the line as the trainer wrote it) of a `trainer-log` line; None for any other line."""
    match = _ATTEMPT_LINE.match(line)
    return (int(match.group(1)), match.group(2)) if match else None


def attempt_log_argv(log_dir: str, *, python: str = "python") -> list[str]:
    """The `trainer-log` container's command."""
    return [python, "-m", f"{MODULE}.attempt_log", "follow", log_dir]
