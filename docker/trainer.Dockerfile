# syntax=docker/dockerfile:1
# The trainer image (spec.trainer.image) that every Ray pod of a MultimodalRLJob runs. Two targets share what mmrl
# adds (the `mmrl` stage: the shared API and the trainer, nothing else):
# - the default, last stage (`gpu`): SkyRL 0.3.0's GPU stack (torch, vLLM, flash-attn, Ray) with mmrl_trainer next to
#   it, what HyperPod runs;
# - `cpu`: the local TRL backend's stack from requirements.lock (the `trainer` extra), for CPU clusters and for
#   testing an image where there is no GPU (`python -m mmrl_trainer selftest` trains with the local backend there).
# KubeRay supplies the container command (`ray start ...`), so neither sets an ENTRYPOINT; each attempt's RayJob
# entrypoint is `python -m mmrl_trainer --config <file> --attempt N` (api/mmrl_api/contract.py).
# Build from the repository root (EFA_INSTALLER_SHA256: see docs/trainer-image.md):
#   docker build -f docker/trainer.Dockerfile --build-arg EFA_INSTALLER_SHA256=<sha256> -t <registry>/mmrl-trainer:0.1.0 .
#   docker build -f docker/trainer.Dockerfile --target cpu -t <registry>/mmrl-trainer:0.1.0-cpu .

# The CPU target's base; `make images` passes a Debian bookworm Python it builds with mmdebstrap (no registry here).
ARG CPU_BASE=python:3.12.16-slim-bookworm

# Exactly two packages: the shared API (models, constants, the trainer contract and config, the adapter rules) and
# the trainer. No operator code: mmrl_trainer never imports mmrl_operator (tests/unit/test_package_boundaries.py).
FROM scratch AS mmrl
COPY api/mmrl_api/ /opt/mmrl/mmrl_api/
COPY trainer/mmrl_trainer/ /opt/mmrl/mmrl_trainer/

# The CPU target: the local backend's stack, pinned by requirements.lock (the versions `make test` runs), in a
# virtualenv first on PATH, for Ray's user (uid 1000, gid 100 as in Ray's images; Debian's `users` group is 100).
FROM ${CPU_BASE} AS cpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN useradd --uid 1000 --gid 100 --create-home --home-dir /home/ray --shell /bin/bash ray
ENV VIRTUAL_ENV=/home/ray/venvs/mmrl \
    PATH=/home/ray/venvs/mmrl/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements.lock /tmp/requirements.lock
RUN python -m venv "$VIRTUAL_ENV" \
    && pip install --no-cache-dir --constraint /tmp/requirements.lock \
        torch torchvision transformers peft trl datasets pyarrow pillow safetensors "ray[default]" \
        tensorboard mlflow-skinny wandb pydantic pyyaml kubernetes \
    && rm /tmp/requirements.lock
ENV PYTHONPATH=/opt/mmrl
COPY --from=mmrl --chown=1000:100 /opt/mmrl /opt/mmrl
USER 1000:100
WORKDIR /home/ray
RUN python -c "import mmrl_trainer.backends.local, mmrl_trainer.selftest, mmrl_trainer.progress, mmrl_trainer.tracking; \
from importlib.metadata import version; \
print('mmrl trainer image (cpu):', {p: version(p) for p in ('torch', 'transformers', 'peft', 'trl', 'ray')})"

# SkyRL's source, only for its uv.lock and to build the `skyrl` package: this commit is SkyRL's git tag
# skyrl-v0.3.0, the release published on PyPI as skyrl 0.3.0 (the version mmrl's SkyRL backend targets).
FROM scratch AS skyrl-src
ADD --chown=1000:100 https://github.com/NovaSky-AI/SkyRL.git#f5bc3b78dfddfb352870d5d7430cd226e5785838 /

# SkyRL's base image for 0.3.0. SkyRL publishes one Docker Hub repository per Ray/Python/CUDA combination and
# documents it without a tag: docs/content/docs/getting-started/installation.mdx at skyrl-v0.3.0 recommends
# `novaskyai/skyrl-train-ray-2.56.0-py3.12-cu12.8`, and its GPU CI (ci/anyscale_gpu_*.yaml) runs on it. So the
# version pin is the repository name and `latest` is the only tag SkyRL refers to; pin its digest when releasing
# (`docker buildx imagetools inspect novaskyai/skyrl-train-ray-2.56.0-py3.12-cu12.8:latest`).
# The image is a toolchain only (Anyscale's ray 2.56.0 slim image for Python 3.12 and CUDA 12.8, the CUDA 12.8
# toolkit, uv in /home/ray/.local/bin, build tools): it has no SkyRL, torch or vLLM, which SkyRL installs per
# run with `uv run`. They are installed below, once, from SkyRL's lock.
# hadolint ignore=DL3007
FROM novaskyai/skyrl-train-ray-2.56.0-py3.12-cu12.8:latest AS gpu

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# EFA for NCCL (docs/trainer-image.md): SkyRL's base image has no libfabric and no aws-ofi-nccl, so NCCL between
# nodes would fall back to TCP sockets on HyperPod's EFA instances. AWS's EFA installer puts libfabric with its efa
# provider in /opt/amazon/efa and, since 1.44, the aws-ofi-nccl plugin in /opt/amazon/ofi-nccl/lib64 (the plugin NCCL
# loads for NCCL_NET_PLUGIN=ofi, which the operator sets on workers that request vpc.amazonaws.com/efa). In a
# container: no kernel module (--skip-kmod, the host's), no ulimit files (--skip-limit-conf, the runtime's) and no
# device check at build time (--no-verify). 1.47.0 is the EFA release of SkyRL's own GPU CI image
# (ci/anyscale_gpu_ci_h100.yaml at skyrl-v0.3.0). The tarball is pinned by version and by the SHA-256 that AWS
# publishes for it ("Verify the EFA installer using a checksum" in the EC2 user guide), given at build time.
ARG EFA_INSTALLER_VERSION=1.47.0
ARG EFA_INSTALLER_SHA256
USER 0:0
# hadolint ignore=DL3003
RUN : "${EFA_INSTALLER_SHA256:?build with --build-arg EFA_INSTALLER_SHA256=<the SHA-256 AWS lists for aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz>, see docs/trainer-image.md}" \
    && mkdir /tmp/efa && cd /tmp/efa \
    && curl -fsSLO --retry 3 "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \
    && echo "${EFA_INSTALLER_SHA256}  aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" | sha256sum --check --strict \
    && tar -xf "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \
    && apt-get update \
    && (cd aws-efa-installer && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify) \
    && test -x /opt/amazon/efa/bin/fi_info && test -f /opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so \
    && cd / && rm -rf /tmp/efa /var/lib/apt/lists/*
ENV PATH=/opt/amazon/efa/bin:$PATH \
    LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib64:/opt/amazon/efa/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The base image's `ray` user (uid 1000, gid 100 as in Ray's images), numeric so runAsNonRoot can verify it.
USER 1000:100
WORKDIR /home/ray
ENV VIRTUAL_ENV=/home/ray/venvs/mmrl \
    PATH=/home/ray/venvs/mmrl/bin:$PATH \
    UV_PYTHON_DOWNLOADS=never \
    UV_LINK_MODE=copy \
    PYTHONUNBUFFERED=1

# SkyRL's FSDP stack exactly as its lock pins it (torch 2.11.0+cu128, vLLM 0.23.0+cu129, flash-attn 2.8.3 and
# Ray 2.56.0, the base image's Ray), in a virtualenv first on PATH so that both `ray start` and the RayJob
# entrypoint run in it. The Python is the base image's 3.12.
RUN --mount=type=bind,from=skyrl-src,target=/tmp/skyrl,rw \
    --mount=type=cache,target=/home/ray/.cache/uv,uid=1000,gid=100 \
    UV_PROJECT_ENVIRONMENT="$VIRTUAL_ENV" /home/ray/.local/bin/uv sync --project /tmp/skyrl \
        --frozen --extra fsdp --no-dev --no-editable --python 3.12

# docker/trainer-pins.txt names the versions of that stack that mmrl's tests run (the SkyRL test venv and the CPU vLLM
# engine take theirs from it): the build fails if SkyRL's lock installed anything else (local builds: +cu128 etc.).
COPY docker/trainer-pins.txt /tmp/trainer-pins.txt
RUN python -c "import sys; from importlib.metadata import version; \
pins = [l.split('#')[0].strip().split('==') for l in open('/tmp/trainer-pins.txt')]; \
bad = [f'{n}: pinned {v}, installed {version(n)}' for n, v in (p for p in pins if len(p) == 2) \
       if version(n).split('+')[0] != v]; \
sys.exit('docker/trainer-pins.txt disagrees with SkyRL lock: ' + '; '.join(bad) if bad else 0)"

# mmrl on top without moving SkyRL's stack: every package SkyRL installed is a constraint, except pydantic and
# PyYAML (with pydantic's typing helpers), which mmrl's API models need at the versions pyproject.toml requires
# (SkyRL's lock has pydantic 2.13.4, mmrl asks for >=2.14). mmrl's `trainer` extra is not installed: its floors
# (torch, transformers, peft, trl, ray) are the local CPU backend's and conflict with SkyRL's pins; the skyrl
# backend needs what SkyRL brings plus the Kubernetes client for progress reports. kubernetes 36.0.3 is the newest
# release that fits SkyRL's aiohttp==3.14.1 (37.x needs aiohttp>=3.14.5). The tracking sinks (mmrl_trainer/tracking):
# tensorboard and wandb come with SkyRL's skyrl-train extra and stay at its pins; mlflow-skinny is MLflow's client.
RUN --mount=type=cache,target=/home/ray/.cache/uv,uid=1000,gid=100 \
    /home/ray/.local/bin/uv pip freeze --python "$VIRTUAL_ENV/bin/python" \
        | grep -viE '^(pydantic|pydantic-core|pyyaml|typing-extensions|typing-inspection|annotated-types)(==| @ )' \
        | grep -v ' @ file://' > /tmp/skyrl-pins.txt \
    && /home/ray/.local/bin/uv pip install --python "$VIRTUAL_ENV/bin/python" --constraint /tmp/skyrl-pins.txt \
        "pydantic>=2.14" "pyyaml>=6.0.2" kubernetes==36.0.3 tensorboard wandb mlflow-skinny \
    && rm /tmp/skyrl-pins.txt

ENV PYTHONPATH=/opt/mmrl
COPY --from=mmrl --chown=1000:100 /opt/mmrl /opt/mmrl
RUN python -c "import mmrl_trainer.backends.skyrl, mmrl_trainer.backends.skyrl_env, mmrl_trainer.progress, \
mmrl_trainer.tracking, torch.utils.tensorboard, wandb, mlflow.tracking; \
from importlib.metadata import version; \
print('mmrl trainer image:', {p: version(p) for p in ('skyrl', 'torch', 'vllm', 'ray', 'pydantic', 'kubernetes')})"
