"""Maze legibility: can the tiny Qwen3-VL read where to go from a maze picture at all? A supervised probe.

A rank-8 LoRA (all linear layers, the vision tower excluded as in RL, since vLLM does not serve LoRA there) is
trained with cross-entropy on the first move of a shortest path, from the maze's first observation, on fresh
mazes each step; printed along the way: the held-out accuracy of the most likely move, the mean probability of
the right move, and the mean move distribution. If even this supervised signal cannot teach it, GRPO's sparse
reward cannot either. A measurement, no threshold.

    PYTHONPATH=api:operator:trainer:local python bench/maze_legibility.py [--size 4] [--cell 8] [--pixels 32]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MMRL_TORCH_THREADS", "1")

from mmrl_api.adapter_rules import VISION_TOWER_MODULES
from mmrl_trainer.envs.grid import MOVES
from mmrl_trainer.envs.maze import MazeEpisode
from mmrl_trainer.envs.maze_data import SEED_STRIDE
from mmrl_trainer.tiny import build_tiny_vlm


def main() -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText, AutoProcessor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--walls", type=float, default=0.2)
    parser.add_argument("--cell", type=int, default=8)
    parser.add_argument("--pixels", type=int, default=32, help="largest image side the processor keeps")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--vision-lora", action="store_true", help="also put the LoRA on the vision tower")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ["MMRL_TORCH_THREADS"]))
    torch.manual_seed(0)
    path = build_tiny_vlm()
    proc = AutoProcessor.from_pretrained(path)
    proc.image_processor.size = {"shortest_edge": 32 * 32, "longest_edge": args.pixels**2}
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
    exclude = None if args.vision_lora else VISION_TOWER_MODULES
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", exclude_modules=exclude))
    moves = list(MOVES)
    move_ids = proc.tokenizer.convert_tokens_to_ids(moves)
    params = {"size": str(args.size), "walls": str(args.walls), "cell": str(args.cell)}

    def batch(seeds):
        prompts, images, targets = [], [], []
        for seed in seeds:
            episode = MazeEpisode(params)
            first = episode.reset(seed)
            assert episode.maze is not None
            chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": first.text}]}]
            prompts.append(proc.apply_chat_template(chat, add_generation_prompt=True))
            images.append([first.image])
            targets.append(moves.index(episode.maze.solution[0]))
        return prompts, images, torch.tensor(targets)

    def move_logits(prompts, images):
        enc = proc(text=prompts, images=images, return_tensors="pt", padding=True)
        return model(**enc).logits[:, -1, move_ids]

    held_prompts, held_images, held_targets = batch(range(SEED_STRIDE, SEED_STRIDE + 128))

    def score() -> str:
        model.eval()
        with torch.no_grad():
            logits = move_logits(held_prompts, held_images)
        model.train()
        probs = logits.softmax(-1)
        accuracy = (logits.argmax(-1) == held_targets).float().mean().item()
        right = probs[torch.arange(len(held_targets)), held_targets].mean().item()
        spread = " ".join(f"{m} {p:.2f}" for m, p in zip(moves, probs.mean(0).tolist(), strict=True))
        return f"accuracy {accuracy:.3f}, p(right move) {right:.3f}, mean p: {spread}"

    prior = torch.bincount(held_targets, minlength=4).max().item() / len(held_targets)
    print(f"held-out 128 mazes; always the commonest right move would score {prior:.3f}", flush=True)
    print(f"step 0: {score()}", flush=True)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        prompts, images, targets = batch(range((step - 1) * args.batch, step * args.batch))
        loss = torch.nn.functional.cross_entropy(move_logits(prompts, images), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 25 == 0 or step == args.steps:
            print(f"step {step}: loss {loss.item():.3f}, {score()} ({time.monotonic() - started:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
