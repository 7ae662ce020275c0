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


def moto_server() -> str | None:
    beside = Path(sys.executable).parent / "moto_server"
    for candidate in (os.environ.get("MMRL_MOTO_SERVER"), str(beside), shutil.which("moto_server")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@contextmanager
def running_s3(buckets: list[str]) -> Iterator[dict[str, str]]:
    """Start the server with `buckets` created; yields the environment a client needs."""
    server = moto_server()
    assert server is not None, "no moto_server: moto[server] is a dev dependency (make setup installs it)"
    port = free_port()
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{server} did not start on {endpoint}") from None
                time.sleep(0.2)
        for bucket in buckets:
            urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=10).close()
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
