"""The token budget of one episode, shared by the trainer, the operator and admission: the engines' max_model_len
holds every turn's prompt (image included), every reply between them and the last reply."""

from __future__ import annotations

import pytest

from mmrl_api import MultimodalRLJob
from mmrl_api.context_budget import (
    engine_max_model_len,
    episode_context_length,
    spec_episode_context_length,
    spec_max_model_len,
    turns_of,
)
from tests.support.corpus import example


@pytest.mark.parametrize(
    ("prompt", "response", "turns", "context", "engine"),
    [
        (1024, 2048, 1, 1024, 3072),  # one turn: the prompt, then its reply
        (1024, 256, 15, 15 * 1024 + 14 * 256, 15 * (1024 + 256)),  # the maze: 18,944 and 19,200
        (2048, 1024, 15, 15 * 2048 + 14 * 1024, 15 * 3072),  # SkyRL's VisGym recipe: 45,056 of its 60,000
        (128, 4, 2, 260, 264),
    ],
)
def test_an_engine_holds_every_turn_and_the_last_reply(prompt, response, turns, context, engine) -> None:
    assert episode_context_length(prompt, response, turns) == context
    assert engine_max_model_len(prompt, response, turns) == engine
    assert engine == context + response


@pytest.mark.parametrize("bad", [(0, 256, 1), (1024, 0, 1), (1024, 256, 0)])
def test_a_budget_of_nothing_is_refused(bad: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="must each be at least 1"):
        engine_max_model_len(*bad)


def test_the_maze_example_trains_on_conversations_of_19200_tokens() -> None:
    spec = MultimodalRLJob.model_validate(example("visgym-maze.yaml")).spec
    assert turns_of(spec.dataset.environment) == 15
    assert spec_episode_context_length(spec.algorithm, spec.dataset.environment) == 18_944
    assert spec_max_model_len(spec.algorithm, spec.dataset.environment) == 19_200


def test_a_single_turn_job_is_one_turn() -> None:
    spec = MultimodalRLJob.model_validate(example("job.yaml")).spec
    assert spec.dataset.environment is None and turns_of(None) == 1
    assert spec_max_model_len(spec.algorithm, None) == spec.algorithm.max_prompt_length + 2048
