"""A real S3-compatible server for tests: moto's server mode on 127.0.0.1, as a subprocess.

moto[server] is a dev dependency, so its `moto_server` sits next to the test interpreter; `MMRL_MOTO_SERVER` may
name another one. The trainer talks to it through pyarrow with
AWS_ENDPOINT_URL, exactly as it talks to S3 in a pod (credentials and endpoint from the environment).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mmrl_local.cluster.controlplane import free_port
from mmrl_local.common import procs


def moto_server() -> str | None:
    beside = Path(sys.executable).parent / "moto_server"
    for candidate in (os.environ.get("MMRL_MOTO_SERVER"), str(beside), shutil.which("moto_server")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


class S3Server:
    """The running server: `env` is what a client needs; `check()` fails, with the server's log, once it has exited."""

    def __init__(self, proc: subprocess.Popen, log: Path, env: dict[str, str]) -> None:
        self.proc, self.log, self.env = proc, log, env

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise AssertionError(f"the S3 server exited with {self.proc.returncode}; its log:\n{tail}")


@contextmanager
def running_s3(buckets: list[str], workdir: Path) -> Iterator[S3Server]:
    """Start the server with `buckets` created, its log in `workdir`. It runs in a session of its own (a signal to
    the test worker's process group does not reach it) and dies with its test worker."""
    server = moto_server()
    assert server is not None, "no moto_server: moto[server] is a dev dependency (make setup installs it)"
    port = free_port()
    log = workdir / "moto.log"
    proc = procs.spawn([server, "-H", "127.0.0.1", "-p", str(port)], log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:  # its port taken by another picker, for one: not someone else's answer
                raise RuntimeError(f"{server} exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
            try:
                urllib.request.urlopen(endpoint, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{server} did not start on {endpoint}") from None
                time.sleep(0.2)
        for bucket in buckets:
            urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=10).close()
        running = S3Server(
            proc,
            log,
            {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true",
            },
        )
        running.check()
        yield running
    finally:
        procs.stop(proc, timeout=30)
