"""Facts about the operator image that `make images` builds from docker/operator.Dockerfile, checked on the image
itself: its processes run as a non-root uid, it holds no compiler, its Python cannot import torch, its entrypoint
answers `--help` within 5 s, and a shared server's gateway runs from it.

Each process starts from the image's config (entrypoint, user, env, working directory) through runc
(``mmrl_local.node.image_run``), under the chart's restricted pod security (read-only root, no capabilities). 5 s is
half the chart's liveness probe delay (initialDelaySeconds 10): the operator must be through its imports well before its
first probe. Measured here: 0.3 s warm, 1.5 s with a cold page cache.
"""

from __future__ import annotations

import json
import shlex
import struct

import pytest

from mmrl_local.node import image_run
from mmrl_local.node.mountns import Mount
from mmrl_local.toolchain import images_build

HELP_SECONDS = 5.0
COMPILERS = ("cc", "c++", "gcc", "g++", "cpp", "clang", "clang++", "tcc", "c89", "c99")


@pytest.fixture(scope="module")
def image() -> images_build.ImageFacts:
    # Reused in a fraction of a second when `make images` (or an earlier run) built it for this checkout.
    return images_build.build_operator()


@pytest.fixture(scope="module")
def config(image: images_build.ImageFacts) -> dict:
    return image_run.image_config(images_build.storage(), image.image)


def run_python(image: images_build.ImageFacts, code: str) -> dict:
    """Run Python code as the image's user, with the image's env and working directory (a pod's `command`
    override), and return the JSON it prints."""
    done = image_run.run(image.image, command=["python", "-c", code])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_operator_image_runs_as_its_numeric_non_root_user(image, config) -> None:
    assert config["User"] == "10001:10001", "runAsNonRoot can only verify a numeric USER"
    ids = run_python(image, "import json, os; print(json.dumps([os.getuid(), os.getgid(), os.geteuid()]))")
    assert ids == [10001, 10001, 10001]


def test_operator_image_holds_no_compiler(image, config) -> None:
    path = next(e.split("=", 1)[1] for e in config["Env"] if e.startswith("PATH="))
    code = (
        "import glob, json, os, shutil; "
        f"found = [shutil.which(c) for c in {COMPILERS!r}]; "
        "found += glob.glob('/usr/lib/gcc/*/*/cc1*') + glob.glob('/usr/libexec/gcc/*/*/cc1*'); "
        "print(json.dumps([f for f in found if f]))"
    )
    assert run_python(image, code) == [], f"compilers on the image's PATH ({path}) or gcc's cc1"


def test_operator_image_cannot_import_torch(image) -> None:
    code = (
        "import importlib.metadata as md, importlib.util, json, sys; "
        "import mmrl_operator.cli.main, mmrl_operator.runtime.run; "
        "print(json.dumps({"
        "'spec': str(importlib.util.find_spec('torch')), "
        "'loaded': sorted(m for m in sys.modules if m.split('.')[0] == 'torch'), "
        "'dists': sorted(d.metadata['Name'] for d in md.distributions() if d.metadata['Name'].startswith('torch'))"
        "}))"
    )
    assert run_python(image, code) == {"spec": "None", "loaded": [], "dists": []}


def test_operator_image_entrypoint_answers_help_within_5_s(image, config) -> None:
    done = image_run.run(image.image, args=["--help"])
    entrypoint = shlex.join(config["Entrypoint"])
    assert done.returncode == 0, f"{entrypoint} --help: {done.stderr}"
    assert done.stdout.startswith("usage: mmrl operator"), done.stdout
    assert done.seconds < HELP_SECONDS, f"{entrypoint} --help took {done.seconds} s"


def test_operator_image_keeps_nothing_of_the_build_hosts_pip_setup(image) -> None:
    """The host's CA bundle and pip config were mounted into the build, not copied: the image's bundle is still its
    base's (Debian's), and where the base had no pip config buildah 1.28 leaves only an empty mount point."""
    store = images_build.storage()
    with image_run.rootfs(store, image.base) as base, image_run.rootfs(store, image.image) as built:
        bundle = "etc/ssl/certs/ca-certificates.crt"
        assert (built / bundle).read_bytes() == (base / bundle).read_bytes()
        pip_conf = built / "etc" / "pip.conf"
        assert not (base / "etc" / "pip.conf").exists()
        assert not pip_conf.exists() or pip_conf.stat().st_size == 0


# In the image: stage the adapter mounted at /ckpt into the store, and say what was made, by whom, and whether the
# Kubernetes client or kopf came along.
STAGE = """
import json, os, sys
from mmrl_api.adapter_digest import tree_digest
from mmrl_operator.gateway.staging import Store
import mmrl_operator.gateway.app
digest = tree_digest("/ckpt/job/adapter")
path, reused = Store("/mnt/adapter", ["/ckpt"]).stage("/ckpt/job/adapter", digest)
print(json.dumps({
    "staged": [path == f"/mnt/adapter/{digest}", sorted(os.listdir(path)), oct(os.stat(path).st_mode & 0o777)],
    "owner": os.stat(path).st_uid,
    "kube": sorted(m for m in sys.modules if m.split(".")[0] in ("kopf", "kubernetes")),
}))
"""


def test_the_gateway_runs_in_the_operator_image_as_its_user_on_a_read_only_root(image, tmp_path) -> None:
    """A ModelServer replica's gateway runs from this image (restricted: user 10001, read-only root): it stages a
    checked, sealed copy of an adapter into its store (an emptyDir, writable) from a read-only adapter mount, and
    needs neither kopf nor the Kubernetes client."""
    adapter, store = tmp_path / "claim" / "job" / "adapter", tmp_path / "store"
    adapter.mkdir(parents=True)
    config = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "bias": "none"}
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    tensor = "base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight"
    header = json.dumps({tensor: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (adapter / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    store.mkdir()
    store.chmod(0o777)  # as a kubelet makes an emptyDir
    mounts = [Mount("/ckpt", str(tmp_path / "claim"), read_only=True), Mount("/mnt/adapter", str(store))]
    done = image_run.run(image.image, command=["python", "-c", STAGE], mounts=mounts)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["staged"] == [True, ["adapter_config.json", "adapter_model.safetensors"], "0o555"]
    assert (found["owner"], found["kube"]) == (10001, [])
    helped = image_run.run(image.image, command=["python", "-m", "mmrl_operator.gateway", "--help"])
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m mmrl_operator.gateway"), helped
