# syntax=docker/dockerfile:1
# The mmrl operator image: the kopf controller that turns MultimodalRLJobs into RayClusters, RayJobs and vLLM
# servers. Prometheus metrics on :9090, kopf's liveness endpoint on :8080/healthz.
# Build from the repository root (the chart's default image; the tag is the chart's appVersion):
#   docker build -f docker/operator.Dockerfile -t ghcr.io/mmrl-dev/mmrl-operator:0.1.0 .
FROM python:3.12.16-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/opt/mmrl

# Only the operator's runtime dependencies: pyproject's core (pydantic, pyyaml) and its `operator` extra (kopf,
# kubernetes, prometheus-client). requirements.lock pins them and everything they pull in.
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --constraint /tmp/requirements.lock \
        kopf kubernetes prometheus-client pydantic pyyaml \
    && rm /tmp/requirements.lock

RUN groupadd --system --gid 10001 mmrl \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin mmrl

WORKDIR /opt/mmrl
# Exactly two packages: the shared API (models, constants, the trainer contract and config, the adapter rules)
# and the operator. No trainer code: mmrl_operator never imports mmrl_trainer (tests/unit/test_package_boundaries.py).
COPY api/mmrl_api/ /opt/mmrl/mmrl_api/
COPY operator/mmrl_operator/ /opt/mmrl/mmrl_operator/
# Bytecode compiled at build time: the sources are root-owned and the process cannot write __pycache__.
RUN python -m compileall -q /opt/mmrl

USER 10001:10001
EXPOSE 9090 8080
# Kubernetes probes kopf's liveness endpoint; a Docker HEALTHCHECK would only duplicate it.
HEALTHCHECK NONE
ENTRYPOINT ["python", "-m", "mmrl_operator.cli", "operator"]
