"""The GPUs of the HyperPod instance types a worker group may name: which GPU, how many per node, how much memory.

`memory_mib` is what the driver reports as the card's total (nvidia-smi's `memory.total`; torch's
`get_device_properties().total_memory` is the same number in bytes), because that is what vLLM multiplies by
`gpu_memory_utilization`. It is a little under the marketed size. Sources:
- GPU model and GPUs per instance: AWS's instance type pages (aws.amazon.com/ec2/instance-types/p5, /p4, /g5, /g6,
  /g6e, /g7e, /p6) and the SageMaker HyperPod list of supported instance types.
- memory.total: H200 read on a lent H200 here (143,771 MiB, bench/measured/gpu_local_step_h200.json's machine);
  the others as nvidia-smi reports them on those instances (NVIDIA's data sheets give the marketed GB).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    model: str
    memory_mib: int

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20


H100 = Gpu("NVIDIA H100 80GB HBM3", 81_559)
H200 = Gpu("NVIDIA H200 141GB HBM3e", 143_771)
A100_40 = Gpu("NVIDIA A100 40GB", 40_960)
A100_80 = Gpu("NVIDIA A100 80GB", 81_920)
A10G = Gpu("NVIDIA A10G 24GB", 23_028)
L4 = Gpu("NVIDIA L4 24GB", 23_034)
L40S = Gpu("NVIDIA L40S 48GB", 46_068)
RTX_PRO_6000 = Gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition 96GB", 97_887)
B200 = Gpu("NVIDIA B200 180GB HBM3e", 183_359)


@dataclass(frozen=True)
class InstanceType:
    gpu: Gpu
    gpus: int


def _family(prefix: str, gpu: Gpu, counts: dict[str, int]) -> dict[str, InstanceType]:
    return {f"{prefix}.{size}": InstanceType(gpu, n) for size, n in counts.items()}


# G-family sizes below 12xlarge carry one GPU; 12xlarge and 24xlarge four (g7e.12xlarge: two); 48xlarge eight.
_G_SIZES_48 = {
    "xlarge": 1,
    "2xlarge": 1,
    "4xlarge": 1,
    "8xlarge": 1,
    "16xlarge": 1,
    "12xlarge": 4,
    "24xlarge": 4,
    "48xlarge": 8,
}

INSTANCE_TYPES: dict[str, InstanceType] = {
    "ml.p5.48xlarge": InstanceType(H100, 8),
    "ml.p5e.48xlarge": InstanceType(H200, 8),
    "ml.p5en.48xlarge": InstanceType(H200, 8),
    "ml.p4d.24xlarge": InstanceType(A100_40, 8),
    "ml.p4de.24xlarge": InstanceType(A100_80, 8),
    "ml.p6-b200.48xlarge": InstanceType(B200, 8),
    **_family("ml.g5", A10G, _G_SIZES_48),
    **_family("ml.g6", L4, _G_SIZES_48),
    **_family("ml.g6e", L40S, _G_SIZES_48),
    **_family(
        "ml.g7e", RTX_PRO_6000, {"2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "12xlarge": 2, "24xlarge": 4, "48xlarge": 8}
    ),
}


HYPERPOD_PREFIX = "ml."


def table_name(instance_type: str) -> str:
    """The table's key for an instance type: HyperPod's name (`ml.p5.48xlarge`), also when it is given as EC2 and
    plain EKS name it (`p5.48xlarge`)."""
    return instance_type if instance_type.startswith(HYPERPOD_PREFIX) else HYPERPOD_PREFIX + instance_type


def instance_gpu(instance_type: str | None) -> InstanceType | None:
    """The GPUs of an instance type (HyperPod's or EC2's name); None when the type is not pinned or not in the
    table."""
    return INSTANCE_TYPES.get(table_name(instance_type)) if instance_type else None
