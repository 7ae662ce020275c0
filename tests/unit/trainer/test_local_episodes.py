"""The local backend's multi-turn pieces: exact loss masks over a scripted episode, GRPO advantages, data order."""

from __future__ import annotations

import math

import pytest
import torch

from mmrl_trainer.backends.episode_grpo import group_advantages, step_rows, token_loss
from mmrl_trainer.backends.episode_rollout import EpisodeTokens, media_token_ids, observation_message
from mmrl_trainer.envs.maze import MazeEpisode
from mmrl_trainer.tiny import build_processor


@pytest.fixture(scope="module")
def processor():
    return build_processor()


def test_every_turns_reply_tokens_are_trained_and_no_observation_token_is(processor) -> None:
    tok = processor.tokenizer
    episode = MazeEpisode({"size": "4"}, max_turns=3)
    tokens = EpisodeTokens(processor)
    first = episode.reset(7)
    tokens.observe(first)
    n_first = len(tokens.ids)
    # Two scripted replies: one the policy ended itself (end-of-turn sampled, so trained), one cut at the length
    # limit (closed by an untrained end-of-turn token).
    reply1 = tok.convert_tokens_to_ids(["up", tok.eos_token])
    reply2 = tok.convert_tokens_to_ids(["<", "answer", ">", "left"])
    tokens.reply(reply1, "up")
    second = episode.step("up").observation
    tokens.observe(second)
    start2 = len(tokens.ids)
    tokens.reply(reply2, "< answer > left")

    assert tokens.loss_mask[:n_first] == [0] * n_first
    assert tokens.ids[n_first : n_first + 2] == reply1 and tokens.loss_mask[n_first : n_first + 2] == [1, 1]
    assert set(tokens.loss_mask[n_first + 2 : start2]) == {0}  # the second observation, its image included
    assert tokens.ids[start2 : start2 + 4] == reply2 and tokens.loss_mask[start2 : start2 + 4] == [1] * 4
    assert tokens.ids[-1] == tok.eos_token_id and tokens.loss_mask[-1] == 0
    assert sum(tokens.loss_mask) == 6
    image_pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert all(m == 0 for i, m in zip(tokens.ids, tokens.loss_mask, strict=True) if i == image_pad)

    # The sequence is exactly the chat template's rendering of the whole conversation, both images kept.
    chat = [
        observation_message(first),
        {"role": "assistant", "content": "up"},
        observation_message(second),
        {"role": "assistant", "content": "< answer > left"},
    ]
    text = processor.apply_chat_template(chat)
    whole = processor(text=[text], images=[first.image, second.image], return_tensors="pt")
    assert tokens.ids == whole["input_ids"][0].tolist()[: len(tokens.ids)]
    inputs = tokens.model_inputs()
    assert torch.equal(inputs["pixel_values"], whole["pixel_values"])
    assert inputs["image_grid_thw"].shape[0] == 2


def test_grpo_advantages_are_over_each_seeds_episodes() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5], 4)
    std = math.sqrt(0.75 / 3)
    assert adv[:4] == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], rel=1e-5)
    assert adv[4:] == [0.0] * 4  # a group that all did equally well teaches nothing
    assert group_advantages([0.3, 1.0], 1) == [0.3, 1.0]  # SkyRL keeps a lone episode's reward
    with pytest.raises(ValueError):
        group_advantages([1.0, 0.0, 1.0], 2)


def test_each_step_has_its_own_rows_and_every_epoch_covers_them_all() -> None:
    steps = [step_rows(10, 4, s, seed=0) for s in range(3)]
    assert sorted(row for rows in steps for row in rows) == list(range(10))
    assert step_rows(10, 4, 1, seed=0) == steps[1]  # a resumed run gets the same rows
    assert step_rows(10, 4, 3, seed=0) != steps[0] or step_rows(10, 4, 4, seed=0) != steps[1]


def test_the_loss_pushes_reply_tokens_by_their_advantage_and_kl_pulls_back() -> None:
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss = token_loss(logp, logp.detach(), None, 2.0, clip_low=0.2, clip_high=0.28, kl_coef=0.0).sum()
    loss.backward()
    assert logp.grad.tolist() == [-2.0, -2.0]  # descending raises both tokens' log-probs
    logp = torch.tensor([-1.0], requires_grad=True)
    ref = torch.tensor([-3.0])
    with_kl = token_loss(logp, logp.detach(), ref, 0.0, clip_low=0.2, clip_high=0.28, kl_coef=0.5).sum()
    assert with_kl.item() == pytest.approx(0.5 * (math.exp(-2.0) + 2.0 - 1))
    with_kl.backward()
    assert logp.grad.item() > 0  # above the reference: the KL term pushes it back down


def test_the_tiny_vlm_can_say_every_maze_move(processor) -> None:
    from mmrl_trainer.envs.grid import MOVES
    from mmrl_trainer.envs.maze import parse_move

    tok = processor.tokenizer
    for move in MOVES:
        ids = tok(f"<answer>{move}</answer>")["input_ids"]
        assert tok.unk_token_id not in ids
        assert parse_move(tok.decode(ids)) == move  # what the policy writes is the move the maze reads


def test_a_reply_may_never_sample_an_image_placeholder(processor) -> None:
    # A sampled <|image_pad|> would claim an image the next turn does not carry (Qwen3-VL's rope index then fails).
    tok = processor.tokenizer
    names = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    assert sorted(media_token_ids(processor)) == sorted(tok.convert_tokens_to_ids(names))
