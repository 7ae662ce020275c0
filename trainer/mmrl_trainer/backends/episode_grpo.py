"""GRPO over whole episodes: group advantages, the masked clipped policy-gradient loss, and the data order.

Advantages follow SkyRL's default (skyrl/backends/skyrl_train/utils/ppo_utils.py:compute_grpo_outcome_advantage):
each episode's reward minus its group's mean, over the group's (unbiased) std + 1e-6; a group of one keeps its
reward. A group is the `samplesPerPrompt` episodes of one seed. Every reply token of an episode gets the episode's
advantage. The loss is PPO's clipped objective with asymmetric clip (clipEpsLow/High), plus `klCoef` x the k3 KL
estimate to the base model (LoRA disabled), averaged over all reply tokens of the step (SkyRL's token_mean).
"""

from __future__ import annotations

import math
import random
from typing import Any

STD_EPSILON = 1e-6


def group_advantages(rewards: list[float], group: int) -> list[float]:
    """Per-episode advantages; `rewards` holds consecutive groups of `group` episodes (one group per seed)."""
    if group < 1 or len(rewards) % group:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group}")
    out: list[float] = []
    for start in range(0, len(rewards), group):
        chunk = rewards[start : start + group]
        if group == 1:
            out.append(chunk[0])
            continue
        mean = sum(chunk) / group
        std = math.sqrt(sum((r - mean) ** 2 for r in chunk) / (group - 1))
        out += [(r - mean) / (std + STD_EPSILON) for r in chunk]
    return out


def step_rows(n_rows: int, batch: int, step: int, seed: int) -> list[int]:
    """The dataset rows of 0-based `step`: a per-epoch shuffle, so a resumed run continues at the same position."""
    per_epoch = max(1, math.ceil(n_rows / batch))
    epoch, index = divmod(step, per_epoch)
    order = list(range(n_rows))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order[index * batch : (index + 1) * batch]


def token_loss(logp, old_logp, ref_logp, advantage: float, *, clip_low: float, clip_high: float, kl_coef: float):
    """Per-token loss of one episode's reply tokens (1-D tensors); the caller sums and divides by the token count."""
    import torch

    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * advantage
    loss = -torch.minimum(unclipped, clipped)
    if ref_logp is not None and kl_coef:
        delta = ref_logp - logp
        loss = loss + kl_coef * (torch.exp(delta) - delta - 1)
    return loss


def sequence_logprobs(model, inputs: dict[str, Any], temperature: float = 1.0):
    """Log-probabilities of each token given the ones before it (length T-1), at the sampling temperature (as TRL
    and SkyRL score them)."""
    import torch

    logits = model(**inputs).logits[0, :-1].float() / temperature
    targets = inputs["input_ids"][0, 1:]
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None])[:, 0]
