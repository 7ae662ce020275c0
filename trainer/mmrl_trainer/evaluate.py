"""Held-out reward of a (possibly LoRA-wrapped) policy: the mean reward of sampled answers at the RL temperature.

Sampling, not greedy decoding, is what GRPO optimises, so this is the number that must rise with training. The
generator is seeded for reproducible comparisons between a base model and its trained adapter.
"""

from __future__ import annotations

from collections.abc import Callable

from mmrl_trainer.data import chat_messages
from mmrl_trainer.synthetic import Example


def held_out_reward(
    model,
    processor,
    examples: list[Example],
    score: Callable[[str, str], float],
    *,
    samples: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 8,
    seed: int = 1234,
    batch: int = 64,
) -> float:
    import torch

    # fork_rng: evaluating at a checkpoint must not shift the training RNG stream, or a resumed run (which
    # restores the RNG saved before the evaluation) would diverge from an uninterrupted one.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return _mean_reward(model, processor, examples, score, samples, temperature, max_new_tokens, batch)


def _mean_reward(model, processor, examples, score, samples, temperature, max_new_tokens, batch) -> float:
    import torch

    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    for start in range(0, len(examples), batch):
        chunk = examples[start : start + batch]
        chats = [chat_messages(e, lambda i, img: {"type": "image"}) for e in chunk]
        texts = [processor.apply_chat_template(c, add_generation_prompt=True) for c in chats]
        images = [e.images for e in chunk] if any(e.images for e in chunk) else None
        enc = processor(text=texts, images=images, return_tensors="pt", padding=True)
        with torch.no_grad():
            for _ in range(samples):
                out = model.generate(
                    **enc, max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_k=0, top_p=1.0
                )
                answers = processor.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
                total += sum(score(a, e.answer) for a, e in zip(answers, chunk, strict=True))
                count += len(chunk)
    model.train(was_training)
    return total / max(1, count)
