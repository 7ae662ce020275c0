"""One multi-turn episode of the local backend, token in, token out: what the policy saw and which tokens it wrote.

The conversation is kept as the exact token sequence the policy is conditioned on. Each observation appends the
chat template's text for it (the template rendered up to the new generation prompt, minus what was rendered
before), tokenised together with its image; each reply appends the very token ids the policy sampled. So the
sequence trained on is the one generated from (no re-tokenisation of replies), every earlier turn's image stays
in the context, as in SkyRL's VLM generator (skyrl/train/generators/skyrl_vlm_generator.py:agent_loop re-renders
the whole conversation every turn), and `loss_mask` is 1 exactly on the reply tokens of every turn (the
end-of-turn token included, as the policy chose to stop) and 0 on prompt and observation tokens. A reply cut at
`maxResponseLength` is closed with an untrained end-of-turn token.

An episode ends when the environment says done, or when its context would pass `limit` tokens (SkyRL's
generator.max_input_length, see skyrl_config.episode_context_length); its reward is the sum of the environment's
step rewards (the maze pays only at its last step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmrl_trainer.envs import Episode, Observation


def observation_message(observation: Observation) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "image"}] if observation.image is not None else []
    return {"role": "user", "content": [*parts, {"type": "text", "text": observation.text}]}


@dataclass
class EpisodeTokens:
    """The token sequence of one episode so far, its loss mask, and the image tensors its observations brought."""

    processor: Any
    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    pixel_values: list[Any] = field(default_factory=list)
    grids: list[Any] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    rendered: str = ""

    def _render(self, generation_prompt: bool) -> str:
        return self.processor.apply_chat_template(self.messages, add_generation_prompt=generation_prompt)

    def observe(self, observation: Observation) -> None:
        """Append an observation (as a user turn) and the generation prompt of the policy's next reply."""
        self.messages.append(observation_message(observation))
        text = self._render(True)
        if not text.startswith(self.rendered):
            raise ValueError("the model's chat template re-renders earlier turns differently; cannot train turn-wise")
        images = [observation.image] if observation.image is not None else None
        enc = self.processor(text=[text[len(self.rendered) :]], images=images, return_tensors="pt")
        new = enc["input_ids"][0].tolist()
        self.ids += new
        self.loss_mask += [0] * len(new)
        if images:
            self.pixel_values.append(enc["pixel_values"])
            self.grids.append(enc["image_grid_thw"])
        self.rendered = text

    def reply(self, ids: list[int], text: str) -> None:
        """Append the policy's sampled reply tokens (trained) and close its turn."""
        eos = self.processor.tokenizer.eos_token
        eos_id = self.processor.tokenizer.eos_token_id
        self.ids += ids
        self.loss_mask += [1] * len(ids)
        if not ids or ids[-1] != eos_id:
            self.ids.append(eos_id)
            self.loss_mask.append(0)
        self.messages.append({"role": "assistant", "content": text})
        full = self._render(False)
        self.rendered = full[: full.rindex(eos) + len(eos)]

    def model_inputs(self) -> dict[str, Any]:
        """The forward/generate inputs of the sequence so far (one row, no padding)."""
        import torch

        inputs: dict[str, Any] = {
            "input_ids": torch.tensor([self.ids]),
            "attention_mask": torch.ones(1, len(self.ids), dtype=torch.long),
        }
        if self.pixel_values:
            # Which tokens are image tokens: Qwen3-VL's multimodal RoPE needs it alongside the images.
            inputs["mm_token_type_ids"] = torch.tensor(self.processor.create_mm_token_type_ids([self.ids]))
            inputs["pixel_values"] = torch.cat(self.pixel_values)
            inputs["image_grid_thw"] = torch.cat(self.grids)
        return inputs


@dataclass
class EpisodeRollout:
    seed: int
    tokens: EpisodeTokens
    replies: list[str]
    reward: float
    success: bool

    @property
    def turns(self) -> int:
        return len(self.replies)

    @property
    def response_tokens(self) -> int:
        return sum(self.tokens.loss_mask)


def media_token_ids(processor) -> list[int]:
    """Image/video placeholder tokens: a reply must never contain one, or the next turn's context would claim an
    image that does not exist (Qwen3-VL's rope index then fails). Suppressed at sampling only."""
    tok = processor.tokenizer
    names = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
    return [i for i in tok.convert_tokens_to_ids(list(names)) if i is not None and i != tok.unk_token_id]


def sample_reply(model, tokens: EpisodeTokens, *, max_new_tokens: int, temperature: float) -> list[int]:
    """The policy's next reply as token ids, ending at (and including) its end-of-turn token if it chose one."""
    import torch

    inputs = tokens.model_inputs()
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=True,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            suppress_tokens=media_token_ids(tokens.processor),
        )
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    eos_id = tokens.processor.tokenizer.eos_token_id
    return new[: new.index(eos_id) + 1] if eos_id in new else new


def play_episode(
    model, processor, episode: Episode, seed: int, *, max_new_tokens: int, temperature: float, limit: int
) -> EpisodeRollout:
    tokens = EpisodeTokens(processor)
    tokens.observe(episode.reset(seed))
    replies: list[str] = []
    reward, success = 0.0, False
    while len(tokens.ids) + max_new_tokens <= limit:
        ids = sample_reply(model, tokens, max_new_tokens=max_new_tokens, temperature=temperature)
        text = processor.tokenizer.decode(ids, skip_special_tokens=True)
        tokens.reply(ids, text)
        replies.append(text)
        result = episode.step(text)
        reward += result.reward
        success = bool(result.info.get("success", success))
        if result.done:
            break
        tokens.observe(result.observation)
    return EpisodeRollout(seed, tokens, replies, reward, success)
