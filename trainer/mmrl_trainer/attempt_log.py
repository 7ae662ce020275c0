"""Each attempt's trainer log on the job's volume, so it outlives the Ray pods and nodes it ran on.

`start(job_dir, attempt)` copies everything the trainer process writes to its stdout and stderr (its log lines,
TRL's and SkyRL's driver output, the final `mmrl-trainer error:` line) into `<jobDir>/logs/attempt-<N>.log`, next to
SkyRL's own `infra-*.log` files. The Ray job's driver log on the head dies with the head; this file does not.

`python -m mmrl_trainer.attempt_log follow DIR` is the head pod's `trainer-log` container (builders/raycluster.py):
it prints every attempt's log in attempt order, each line prefixed `[attempt N] `, then follows them. So
`kubectl logs <head pod> -c trainer-log` (pods/log, which the `view` role grants) shows every attempt's log, also
those whose pods are gone, and `mmrl logs NAME [--attempt N] [--follow]` reads exactly that. s3:// job directories
have no shared file system: their trainer log is the Ray job's only.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from mmrl_api.contract import ATTEMPT_LOG_DIR, attempt_log_line

log = logging.getLogger("mmrl_trainer.attempt_log")

NAME = re.compile(r"^attempt-(\d+)\.log$")


def log_dir(job_dir: str) -> Path | None:
    """`<jobDir>/logs` as this process sees it; None for an s3:// job directory."""
    return None if job_dir.startswith("s3://") else Path(job_dir.removeprefix("file://")) / ATTEMPT_LOG_DIR


class _Tee:
    """A text stream that writes to the original stream and to the attempt's log file."""

    def __init__(self, stream: TextIO, copy: TextIO) -> None:
        self._stream, self._copy = stream, copy

    def write(self, text: str) -> int:
        self._stream.write(text)
        with contextlib.suppress(OSError, ValueError):  # the volume went away: training goes on, the copy stops
            self._copy.write(text)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()
        with contextlib.suppress(OSError, ValueError):
            self._copy.flush()

    def __getattr__(self, name: str):  # fileno, isatty, encoding, ... of the original stream
        return getattr(self._stream, name)


def start(job_dir: str, attempt: int) -> Path | None:
    """Copy this process's stdout and stderr into `<jobDir>/logs/attempt-<attempt>.log` (appended: a trainer
    started twice for one attempt keeps both runs). Returns the file, or None where there is none to write."""
    directory = log_dir(job_dir)
    if directory is None:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        copy = open(directory / f"attempt-{attempt}.log", "a", buffering=1)  # noqa: SIM115 - lives as long as we do
    except OSError as err:
        log.warning("cannot write the attempt log under %s (training goes on): %s", directory, err)
        return None
    old = {"out": sys.stdout, "err": sys.stderr}
    sys.stdout = _Tee(old["out"], copy)  # type: ignore[assignment]
    sys.stderr = _Tee(old["err"], copy)  # type: ignore[assignment]
    for handler in logging.getLogger().handlers:  # logging.basicConfig's handler still holds the old stream
        if isinstance(handler, logging.StreamHandler) and handler.stream is old["err"]:
            handler.setStream(sys.stderr)
        elif isinstance(handler, logging.StreamHandler) and handler.stream is old["out"]:
            handler.setStream(sys.stdout)
    return directory / f"attempt-{attempt}.log"


def attempts(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for path in directory.glob("attempt-*.log") if directory.is_dir() else []:
        match = NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def follow(directory: Path, out: TextIO, *, poll: float = 1.0, stop: Callable[[], bool] = lambda: False) -> None:
    """Print every attempt's complete lines, prefixed `[attempt N] `, in attempt order; then the lines added to any of
    them, until `stop()`. A line is printed once it ends with a newline."""
    offsets: dict[Path, int] = {}
    while True:
        for n, path in attempts(directory):
            start_at = offsets.get(path, 0)
            with open(path, "rb") as fh:
                fh.seek(start_at)
                data = fh.read()
            end = data.rfind(b"\n") + 1
            for line in data[:end].decode(errors="replace").splitlines():
                out.write(attempt_log_line(n, line) + "\n")
            offsets[path] = start_at + end
        out.flush()
        if stop():
            return
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmrl_trainer.attempt_log")
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("follow", help="print every attempt's log under DIR, prefixed, and follow them")
    f.add_argument("dir", type=Path)
    f.add_argument("--poll", type=float, default=1.0)
    args = parser.parse_args(argv)
    follow(args.dir, sys.stdout, poll=args.poll)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
