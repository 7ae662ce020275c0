"""Will a job fit its GPUs? The memory of one GPU, part by part, before any GPU is spent.

SkyRL backend (FSDP, policy and vLLM engines colocated on every GPU, one engine per GPU): the two phases take
turns. While the policy trains, the engines sleep; while the engines generate, the policy is offloaded to CPU
(skyrl train/trainer.py, colocate_all). Each GPU therefore needs room for the larger of:
- training: the fp32 master weights, sharded over the world size (SkyRL loads the policy with bf16=False,
  backends/skyrl_train/workers/fsdp/fsdp_worker.py, and FSDP shards every parameter); the bf16 copies FSDP gathers
  to compute (one decoder layer and the one it prefetches, or the embeddings when they are bigger); the LoRA's
  fp32 weights, gradients and two AdamW moments, sharded too; and one micro-batch's activations (below);
- rollout: what vLLM claims, `gpu_memory_utilization` x the GPU's memory. Inside that claim vLLM puts the bf16
  weights, its profiled peak activation, and the KV cache in what is left (vllm v1/worker/gpu_worker.py,
  determine_available_memory); an engine refuses to start unless the KV cache holds one request of
  `max_model_len` tokens (v1/core/kv_cache_utils.py, check_enough_kv_cache_memory);
plus each process's CUDA context (the trainer's and the engine's, about 1 GiB together with NCCL's buffers).

Activations of a training micro-batch (gradient checkpointing is on, SkyRL's default), per token of the longest
sequence (`max_model_len`, the micro-batch is padded to it): each decoder layer's input kept for the recompute
(hidden x 2 bytes per layer), one layer's tensors saved while it is recomputed (two norms' inputs and outputs, q,
k, v, the attention output, the MLP's gate, up, activation and product: 5 x hidden + 2 x q + 2 x kv +
4 x intermediate, in bf16), and the bf16 logits with their gradient (2 x vocab x 2 bytes). SkyRL turns logits into
log-probs 1,024 positions at a time in fp32 (trainer.logprobs_chunk_size), which adds a chunk's fp32 logits twice.
vLLM's profiled activation is estimated from its profile run: `max_num_batched_tokens` (8,192, SkyRL's default)
tokens through one layer's largest tensors, the sampler's fp32 logits for `max_num_seqs` (1,024) sequences, and
1 GiB for CUDA graphs and allocations outside torch.

Local backend (TRL on one GPU, fp32, no FSDP and no vLLM): the fp32 weights; the LoRA state; generation's KV cache
(fp32, every completion of a step at once, prompt + response tokens); and the same checkpointed activations in
fp32 over every completion of the step (TRL puts a step's completions in one micro-batch), with the logits of a
chunk of completion tokens. bench/gpu_local_step.py measures this on a GPU; bench/notes.md compares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Protocol

from mmrl_api.architecture import Architecture, reference_architecture
from mmrl_api.cluster import ClusterSpec
from mmrl_api.context_budget import spec_episode_context_length, spec_max_model_len
from mmrl_api.gpus import Gpu, instance_gpu
from mmrl_api.spec import AlgorithmSpec, DatasetSpec, LoRASpec, ModelSpec, TrainerSpec

GiB = 2**30
FP32, BF16 = 4, 2
ADAMW_STATES = 2
VLLM_BLOCK_SIZE = 16  # vLLM's default KV block (page) size in tokens
VLLM_MAX_BATCHED_TOKENS = 8192  # skyrl InferenceEngineConfig.max_num_batched_tokens
VLLM_MAX_SEQS = 1024  # skyrl InferenceEngineConfig.max_num_seqs
VLLM_FIXED = 1 * GiB  # CUDA graphs and non-torch allocations of an engine
PROCESS_OVERHEAD = 1 * GiB  # CUDA contexts of the processes on one GPU, NCCL buffers
LOGPROB_CHUNK = 1024  # skyrl trainer.logprobs_chunk_size
# The training estimate came out 4-8% under the peak torch measured on an H200 (bench/measured, bench/notes.md), so a
# job is refused unless its training phase fits in this share of the GPU.
TRAINING_SHARE = 0.92


@dataclass(frozen=True)
class PlanInputs:
    backend: str
    arch: Architecture
    gpu: Gpu
    world_size: int
    lora_rank: int
    lora_targets: tuple[str, ...]
    micro_batch: int
    max_model_len: int
    """Engine context (SkyRL): the longest conversation a rollout can reach, prompts and images included."""
    rollout_util: float
    completions: int = 1
    """Local backend: completions generated and trained at once (trainBatchSize x samplesPerPrompt)."""
    prompt_tokens: int = 0
    response_tokens: int = 0


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Engine:
    claim: int
    weights: int
    activation: int
    kv_bytes: int
    kv_tokens: int
    max_model_len: int

    @property
    def sequences(self) -> float:
        """How many max-length sequences the KV cache holds at once."""
        return self.kv_tokens / self.max_model_len


@dataclass(frozen=True)
class MemoryPlan:
    inputs: PlanInputs
    training: dict[str, int]
    """Per GPU, while the policy trains: weights, gathered, lora_state, activations, (local) generation_kv."""
    engine: Engine | None
    generation: dict[str, int] | None = None
    """Local backend, per GPU, while TRL generates: weights, lora_state, generation_kv."""
    problems: list[Problem] = field(default_factory=list)

    @property
    def training_bytes(self) -> int:
        return sum(self.training.values()) + PROCESS_OVERHEAD

    @property
    def rollout_bytes(self) -> int:
        if self.engine is not None:
            return self.engine.claim + PROCESS_OVERHEAD
        return sum((self.generation or {}).values()) + PROCESS_OVERHEAD

    @property
    def peak_bytes(self) -> int:
        return max(self.training_bytes, self.rollout_bytes)

    @property
    def fits(self) -> bool:
        return not self.problems

    def verdict(self) -> str:
        """One line: the peak against the GPU, and whether it fits."""
        i = self.inputs
        return (
            f"GPU memory plan: peak {self.peak_bytes / GiB:.1f} of {i.gpu.memory_bytes / GiB:.1f} GiB per "
            f"{i.gpu.model}, world size {i.world_size}: " + ("fits" if self.fits else "does NOT fit")
        )

    def lines(self, *, problems: bool = True) -> list[str]:
        i = self.inputs
        out = [
            f"GPU memory plan, per GPU ({i.gpu.model}, {i.gpu.memory_bytes / GiB:.1f} GiB; {i.backend} backend, "
            f"world size {i.world_size}; {i.arch.params / 1e9:.2f}B parameters):",
            "  training: "
            + ", ".join(f"{k.replace('_', ' ')} {v / GiB:.1f}" for k, v in self.training.items())
            + f", CUDA contexts {PROCESS_OVERHEAD / GiB:.1f} = {self.training_bytes / GiB:.1f} GiB",
        ]
        if self.engine:
            e = self.engine
            out.append(
                f"  rollout: vLLM claims {e.claim / GiB:.1f} GiB ({i.rollout_util} of the GPU): weights "
                f"{e.weights / GiB:.1f}, activation ~{e.activation / GiB:.1f}, KV cache {e.kv_bytes / GiB:.1f} GiB = "
                f"{e.kv_tokens:,} tokens = {e.sequences:.1f} sequences of max_model_len {e.max_model_len:,}"
            )
        out.append(
            f"  peak {self.peak_bytes / GiB:.1f} of {i.gpu.memory_bytes / GiB:.1f} GiB: "
            + ("fits" if self.fits else "does NOT fit")
        )
        out += [f"  ! {p}" for p in self.problems] if problems else []
        return out

    def status(self) -> dict[str, object]:
        """`status.memoryPlan` (camelCase, bytes and tokens as integers)."""
        e = self.engine
        return {
            "gpu": self.inputs.gpu.model,
            "gpuBytes": self.inputs.gpu.memory_bytes,
            "trainingBytes": self.training_bytes,
            "rolloutBytes": self.rollout_bytes,
            **({"kvCacheTokens": e.kv_tokens, "maxModelLen": e.max_model_len} if e else {}),
            "fits": self.fits,
            "summary": " ".join(line.strip() for line in self.lines()[1:]),
        }


def _layer_activation(a: Architecture) -> int:
    """Elements one decoder layer saves per token while it is recomputed in the backward pass."""
    return 5 * a.hidden + 2 * a.q_out + 2 * a.kv_out + 4 * a.intermediate


def training_activations(a: Architecture, seqs: int, seq_len: int, dtype: int, *, flash: bool, logits: bool) -> int:
    """Checkpointed activations of `seqs` sequences of `seq_len` tokens. Without flash attention one layer's
    attention scores and probabilities (heads x seq_len² each) are kept too; `logits`: the logits and their
    gradient are materialised in `dtype`, plus two fp32 chunks of SkyRL's chunked log-softmax."""
    tokens = seqs * seq_len
    kept = tokens * a.layers * a.hidden * dtype
    layer = tokens * _layer_activation(a) * dtype
    scores = 0 if flash else seqs * 2 * a.heads * seq_len * seq_len * dtype
    head = 2 * tokens * a.vocab * dtype + 2 * min(LOGPROB_CHUNK, tokens) * a.vocab * FP32 if logits else 0
    return kept + layer + scores + head


def vllm_activation(a: Architecture) -> int:
    layer = VLLM_MAX_BATCHED_TOKENS * (2 * a.hidden + 2 * a.intermediate + a.q_out + 2 * a.kv_out) * BF16
    return layer + VLLM_MAX_SEQS * a.vocab * FP32 + VLLM_FIXED


def kv_cache_bytes(a: Architecture, tokens: int, dtype: int = BF16) -> int:
    """vLLM's KV cache for `tokens` tokens of one request: whole blocks, every layer (FullAttentionSpec)."""
    return math.ceil(tokens / VLLM_BLOCK_SIZE) * VLLM_BLOCK_SIZE * a.kv_bytes_per_token(dtype)


def engine_plan(i: PlanInputs) -> Engine:
    a = i.arch
    claim = int(i.rollout_util * i.gpu.memory_bytes)
    weights, activation = a.params * BF16, vllm_activation(a)
    kv = max(0, claim - weights - activation)
    # vLLM's block pool keeps one block (every layer's page) back as its null block (kv_cache_utils.py).
    usable_blocks = max(0, kv // block_bytes(a) - 1)
    return Engine(claim, weights, activation, kv, usable_blocks * VLLM_BLOCK_SIZE, i.max_model_len)


def block_bytes(a: Architecture) -> int:
    """One KV block of every layer: vLLM's FullAttentionSpec page size x layers."""
    return VLLM_BLOCK_SIZE * a.kv_bytes_per_token(BF16)


def plan(i: PlanInputs) -> MemoryPlan:
    a, w = i.arch, max(1, i.world_size)
    lora = a.lora_params(i.lora_rank, list(i.lora_targets))
    lora_state = lora * FP32 * (2 + ADAMW_STATES)
    if i.backend == "local":
        # TRL's fused LM head scores log-probs without materialising the logits (trl trainer/utils.py,
        # add_fused_lm_head), and transformers runs fp32 attention without a flash kernel.
        seq = i.prompt_tokens + i.response_tokens
        weights = {"weights": a.params * FP32, "lora_state": lora_state}
        training = {
            **weights,
            "activations": training_activations(a, i.completions, seq, FP32, flash=False, logits=False),
        }
        generation = {**weights, "generation_kv": i.completions * seq * a.kv_bytes_per_token(FP32)}
        result = MemoryPlan(i, training, None, generation)
    else:
        embeddings = a.vocab * a.hidden * (1 if a.tied_embeddings else 2)
        training = {
            "weights": a.params * FP32 // w,
            "gathered": (a.layer_params + max(a.layer_params, embeddings)) * BF16,
            "lora_state": lora_state // w,
            "activations": training_activations(a, i.micro_batch, i.max_model_len, BF16, flash=True, logits=True),
        }
        result = MemoryPlan(i, training, engine_plan(i))
    return replace(result, problems=_problems(result))


def _problems(p: MemoryPlan) -> list[Problem]:
    i, total, found = p.inputs, p.inputs.gpu.memory_bytes, []
    gib = lambda b: f"{b / GiB:.1f} GiB"  # noqa: E731
    e = p.engine
    if e is not None and e.kv_tokens < e.max_model_len:
        need = kv_cache_bytes(i.arch, e.max_model_len)
        found.append(
            Problem(
                "spec.algorithm.rolloutGpuMemoryUtilization",
                f"each vLLM engine's KV cache would hold {e.kv_tokens:,} tokens ({gib(e.kv_bytes)}), less than one "
                f"sequence of max_model_len {e.max_model_len:,} ({gib(need)}); vLLM refuses to start. Raise it, or "
                "lower maxPromptLength, maxResponseLength or environment.maxTurns",
            )
        )
    if e is not None and e.claim + PROCESS_OVERHEAD > total:
        found.append(
            Problem(
                "spec.algorithm.rolloutGpuMemoryUtilization",
                f"vLLM would claim {gib(e.claim)} and the colocated trainer keeps {gib(PROCESS_OVERHEAD)}: more than "
                f"the GPU's {gib(total)}",
            )
        )
    if p.training_bytes > TRAINING_SHARE * total:
        biggest = max(p.training, key=lambda k: p.training[k])
        if biggest != "activations":
            knob = "spec.cluster.workerGroups[*].replicas"
        else:
            knob = "spec.algorithm.microBatchSizePerGpu" if i.backend != "local" else "spec.algorithm.trainBatchSize"
        found.append(
            Problem(
                knob,
                f"training needs {gib(p.training_bytes)} per GPU ("
                + ", ".join(f"{k.replace('_', ' ')} {gib(v)}" for k, v in p.training.items())
                + f"), more than {TRAINING_SHARE:.0%} of the GPU's {gib(total)} (the estimate's margin); "
                + (
                    "add GPUs to shard the weights over"
                    if biggest != "activations"
                    else "lower it, or shorten sequences"
                ),
            )
        )
    return found


class _Task(Protocol):
    """What a plan reads from a job spec or a TrainerConfig."""

    model: ModelSpec
    lora: LoRASpec
    algorithm: AlgorithmSpec
    dataset: DatasetSpec


def task_plan(task: _Task, backend: str, gpu: Gpu, world_size: int, arch: Architecture) -> MemoryPlan:
    algo, env = task.algorithm, task.dataset.environment
    return plan(
        PlanInputs(
            backend=backend,
            arch=arch,
            gpu=gpu,
            world_size=world_size,
            lora_rank=task.lora.rank,
            lora_targets=tuple(task.lora.target_modules),
            micro_batch=algo.micro_batch_size_per_gpu,
            max_model_len=spec_max_model_len(algo, env),
            rollout_util=algo.rollout_gpu_memory_utilization,
            completions=algo.train_batch_size * algo.samples_per_prompt,
            prompt_tokens=spec_episode_context_length(algo, env),
            response_tokens=algo.max_response_length,
        )
    )


class _Job(_Task, Protocol):
    cluster: ClusterSpec
    trainer: TrainerSpec


def spec_plan(spec: _Job, arch: Architecture | None = None) -> MemoryPlan | None:
    """The plan of a job spec on the tightest of its worker groups' GPUs; None when the model's architecture (the
    reference table, or `arch` from its config.json) or every group's GPU is unknown, or no group has GPUs."""
    arch = arch or reference_architecture(spec.model.name)
    if arch is None:
        return None
    groups = spec.cluster.worker_groups
    world = sum(g.replicas * max(1, g.gpus) for g in groups)
    plans = [
        task_plan(spec, spec.trainer.backend, found.gpu, world, arch)
        for g in groups
        if g.gpus > 0 and (found := instance_gpu(g.instance_type)) is not None
    ]
    return min(plans, key=lambda p: p.inputs.gpu.memory_bytes - p.peak_bytes, default=None)
