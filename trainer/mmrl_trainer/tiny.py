"""Builds, offline, a tiny but real Qwen3-VL: word-level tokenizer, Qwen3-VL processor and a warmed-up model.

A randomly initialised tiny VLM has near-uniform logits, so a LoRA barely moves it and RL tests become noise. The
builder therefore gives the base a short supervised warm-up on the colour task with deliberately noisy targets
(right colour, wrong colour, or a sloppy multi-word answer): the result is a weak pretrained model that already
"sees" colours but answers correctly only a minority of the time, which GRPO + a servable LoRA (no
modules_to_save) can then sharpen. Builds are cached under `$MMRL_CACHE/models/<key>` (default ~/.cache/mmrl).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from mmrl_trainer.envs.grid import MOVES
from mmrl_trainer.synthetic import COLOURS, QUESTION, colour_examples

RECIPE_VERSION = 5
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
WORDS = sorted(
    {*COLOURS, "What", "what", "colour", "colours", "color", "is", "the", "image", "?", "Answer", "answer"}
    | {"with", "one", "word", ".", "it", "a", "system", "user", "assistant", "maybe", "or", "not", "I", "see"}
    # The maze's moves (envs/grid.py MOVES), so the tiny VLM can act in the built-in environment; `<answer>` is
    # spelt "<", "answer", ">" by the word-level pre-tokenizer, and the maze also reads a bare move word.
    | {*MOVES, "<", ">", "</"}
)
# Qwen-style template: the processor expands each <|image_pad|> to the image's merged patch count. Like Qwen3-VL's,
# it accepts both TRL's {"type": "image"} parts and SkyRL's {"type": "image_url"} parts.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string -%}{{ ' ' + message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] in ('image', 'image_url') -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'text' -%}{{ ' ' + part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)
PATCH, MERGE, TEMPORAL = 8, 2, 2
# head_dim 32 (not hidden/heads = 16): vLLM's CPU attention supports head sizes 32, 64, 80, ... only.
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 32}


def cache_root() -> Path:
    return Path(os.environ.get("MMRL_CACHE", Path.home() / ".cache" / "mmrl"))


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<unk>", *SPECIALS, *WORDS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.decoder = decoders.WordPiece(prefix="##")  # joins words with single spaces
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIALS[1:],
        padding_side="left",
        model_max_length=512,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_processor():
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    pixels = 32 * 32  # every image is resized to 32x32 → a 4x4 patch grid → 4 merged image tokens
    size = {"shortest_edge": pixels, "longest_edge": pixels}
    common = {"patch_size": PATCH, "temporal_patch_size": TEMPORAL, "merge_size": MERGE, "size": size}
    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(**common),
        tokenizer=build_tokenizer(),
        video_processor=Qwen3VLVideoProcessor(**common),
        chat_template=CHAT_TEMPLATE,
    )


def build_config(tokenizer):
    from transformers import Qwen3VLConfig

    head_dim = TEXT["head_dim"]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    return Qwen3VLConfig(
        text_config={
            **TEXT,
            "vocab_size": len(tokenizer),
            "num_key_value_heads": 2,
            "head_dim": head_dim,
            "max_position_embeddings": 512,
            # mrope sections (t, h, w) must sum to head_dim / 2.
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [head_dim // 4, head_dim // 8, head_dim // 8],
            },
            "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": PATCH,
            "temporal_patch_size": TEMPORAL,
            "spatial_merge_size": MERGE,
            "out_hidden_size": TEXT["hidden_size"],
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def noisy_target(colour: str, rng: random.Random, p_correct: float) -> str:
    """The warm-up label: mostly not the clean right answer, so the base model is weak but colour-aware."""
    u = rng.random()
    if u < p_correct:
        return colour
    if u < p_correct + 0.35:
        return rng.choice(sorted(COLOURS))
    return rng.choice([f"{colour} {colour}", f"the {colour}", f"it is {colour}", f"{colour} or {colour}"])


def warm_up(
    model,
    processor,
    *,
    steps: int,
    seed: int,
    p_correct: float,
    move_steps: int = 0,
    batch: int = 32,
    lr: float = 3e-3,
) -> None:
    """The colour task's noisy warm-up; `move_steps` of its steps (spread evenly) also take a maze batch
    (`move_loss`), interleaved so that neither task's answers take over the other's prompts."""
    import torch

    rng = random.Random(seed)
    move_rng = random.Random(seed + 2000)
    examples = colour_examples(steps * batch, seed + 1000)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    eos = processor.tokenizer.eos_token
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    every = steps // move_steps if move_steps else 0
    model.train()
    for i in range(steps):
        chunk = examples[i * batch : (i + 1) * batch]
        texts = [f"{prompt} {noisy_target(e.answer, rng, p_correct)} {eos}" for e in chunk]
        processor.tokenizer.padding_side = "right"
        enc = processor(text=texts, images=[e.images for e in chunk], return_tensors="pt", padding=True)
        processor.tokenizer.padding_side = "left"
        n_prompt = len(processor(text=[prompt], images=[chunk[0].images])["input_ids"][0])
        labels = enc["input_ids"].clone()
        labels[:, :n_prompt] = -100
        labels[enc["attention_mask"] == 0] = -100
        loss = model(**enc, labels=labels).loss
        if every and i % every == 0 and i // every < move_steps:
            loss = loss + move_loss(model, processor, move_rng, batch // 2)
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


def move_loss(model, processor, rng: random.Random, batch: int):
    """Loss of answering maze first observations with a random move: the base learns to act, knowing nothing of
    where to go, so RL on the maze has random-walk successes to learn from instead of a reward that is always 0."""
    from mmrl_trainer.envs.maze import MazeEpisode

    eos = processor.tokenizer.eos_token
    prompts, images, texts = [], [], []
    for _ in range(batch):
        first = MazeEpisode({"size": str(rng.choice([3, 4, 5]))}).reset(rng.randrange(10**9))
        chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": first.text}]}]
        prompts.append(processor.apply_chat_template(chat, add_generation_prompt=True))
        images.append([first.image])
        texts.append(f"{prompts[-1]} {rng.choice(sorted(MOVES))} {eos}")
    processor.tokenizer.padding_side = "right"
    enc = processor(text=texts, images=images, return_tensors="pt", padding=True)
    processor.tokenizer.padding_side = "left"
    labels = enc["input_ids"].clone()
    for row, (prompt, image) in enumerate(zip(prompts, images, strict=True)):
        labels[row, : len(processor(text=[prompt], images=[image])["input_ids"][0])] = -100
    labels[enc["attention_mask"] == 0] = -100
    return model(**enc, labels=labels).loss


def recipe(seed: int, warmup_steps: int, p_correct: float, move_steps: int) -> dict:
    import transformers

    return {
        "v": RECIPE_VERSION,
        "seed": seed,
        "warmup_steps": warmup_steps,
        "p_correct": p_correct,
        "move_steps": move_steps,
        "text": TEXT,
        "words": WORDS,
        "transformers": transformers.__version__,
    }


def build_tiny_vlm(
    out_dir: str | Path | None = None,
    *,
    seed: int = 0,
    warmup_steps: int = 120,
    p_correct: float = 0.3,
    move_steps: int = 30,
) -> Path:
    """Return a model directory (config, weights, tokenizer, processor); reuses the cache when the recipe matches."""
    spec = recipe(seed, warmup_steps, p_correct, move_steps)
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    target = Path(out_dir) if out_dir else cache_root() / "models" / f"tiny-qwen3-vl-{key}"
    if (target / "mmrl-tiny.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Parallel test workers ask for the same model at once: one builds it, the others wait and reuse it (a second
    # build would replace the directory under a reader).
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "mmrl-tiny.json").is_file():
            return target
        _build(target, spec, seed, warmup_steps, p_correct, move_steps)
    return target


def _build(target: Path, spec: dict, seed: int, warmup_steps: int, p_correct: float, move_steps: int) -> None:
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    processor = build_processor()
    model = Qwen3VLForConditionalGeneration(build_config(processor.tokenizer))
    # Tiny matmuls: one thread is ~20x faster than two contended ones on a small CPU box.
    threads = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("MMRL_TORCH_THREADS", "1")))
    try:
        warm_up(model, processor, steps=warmup_steps, seed=seed, p_correct=p_correct, move_steps=move_steps)
    finally:
        torch.set_num_threads(threads)
    model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
    model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    # Build next to the target and rename, so a crashed build never leaves a directory that looks finished.
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    model.save_pretrained(staging)
    processor.save_pretrained(staging)
    (staging / "mmrl-tiny.json").write_text(json.dumps(spec, indent=2))
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)


def main(argv: list[str] | None = None) -> None:
    """`python -m mmrl_trainer.tiny [--out DIR]`: build (or reuse) the cached model, optionally copy it to DIR."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mmrl_trainer.tiny", description=main.__doc__)
    parser.add_argument("--out", help="also copy the model directory here (e.g. /models/tiny-qwen3-vl)")
    args = parser.parse_args(argv)
    built = build_tiny_vlm()
    if args.out:
        out = Path(args.out)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(built, out)
        built = out
    print(built)


if __name__ == "__main__":
    main()
