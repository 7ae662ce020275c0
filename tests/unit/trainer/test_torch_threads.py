"""The local backend sets torch's thread count itself: a Ray job's driver inherits OMP_NUM_THREADS=1 from Ray."""

from __future__ import annotations

from mmrl_trainer.backends.local import torch_threads


def test_one_thread_on_cpu_and_every_allowed_cpu_with_a_gpu_whatever_ray_set() -> None:
    ray_driver_env = {"OMP_NUM_THREADS": "1"}  # what Ray 2.60 gave a job driver on the real head (make demo)
    assert torch_threads(ray_driver_env, cuda=False, cpus=16) == 1
    assert torch_threads(ray_driver_env, cuda=True, cpus=16) == 16


def test_mmrl_torch_threads_overrides() -> None:
    assert torch_threads({"MMRL_TORCH_THREADS": "4"}, cuda=True, cpus=16) == 4
    assert torch_threads({"MMRL_TORCH_THREADS": "3"}, cuda=False, cpus=2) == 3
