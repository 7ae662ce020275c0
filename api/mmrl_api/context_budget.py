"""How many tokens one episode's conversation may hold: the context SkyRL's engines must have, and what serving must.

One arithmetic, shared by the trainer (SkyRL's `generator.max_input_length` and the vLLM engines' `max_model_len`),
the operator (the serving Deployment's `--max-model-len`), admission and `mmrl validate` (`inference.maxModelLen`
may not be shorter) and the GPU memory plan (the KV cache must hold one such sequence).

An episode is a conversation: the first prompt, then before each later turn the model's reply and the
environment's next observation. Every turn's prompt part (its text and its image, which `image_budget` holds to
half of it) is held to `maxPromptLength`, and every reply to `maxResponseLength`. So the longest input SkyRL hands
an engine is `turns x maxPromptLength + (turns - 1) x maxResponseLength` (the episode context, which SkyRL's VLM
generator enforces as `max_input_length`), and the engine must still have room to generate the last reply: the
engine's `max_model_len` is `turns x (maxPromptLength + maxResponseLength)`. A single-turn job is one turn. Without
an explicit `max_model_len`, vLLM takes the model's own maximum (262,144 tokens for Qwen3-VL-8B) and refuses to
start when its KV cache cannot hold one request of that length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmrl_api.environment import EnvironmentSpec
    from mmrl_api.spec import AlgorithmSpec


def episode_context_length(max_prompt_length: int, max_response_length: int, max_turns: int = 1) -> int:
    """The longest conversation an episode renders before its last reply: `max_turns` prompts (each image
    included) and the `max_turns - 1` replies between them. For one turn it is the prompt budget."""
    if min(max_prompt_length, max_response_length, max_turns) < 1:
        raise ValueError(
            f"prompt {max_prompt_length}, response {max_response_length} and turns {max_turns} must each be at least 1"
        )
    return max_turns * max_prompt_length + (max_turns - 1) * max_response_length


def engine_max_model_len(max_prompt_length: int, max_response_length: int, max_turns: int = 1) -> int:
    """The context a vLLM engine needs for this job: the longest episode context plus one reply generated after it."""
    return episode_context_length(max_prompt_length, max_response_length, max_turns) + max_response_length


def turns_of(environment: EnvironmentSpec | None) -> int:
    """Turns per episode: the environment's `maxTurns`, or 1 for a single-turn (reward) dataset."""
    return environment.max_turns if environment is not None else 1


def spec_episode_context_length(algorithm: AlgorithmSpec, environment: EnvironmentSpec | None) -> int:
    """`episode_context_length` of a job's `spec.algorithm` and `spec.dataset.environment`."""
    return episode_context_length(algorithm.max_prompt_length, algorithm.max_response_length, turns_of(environment))


def spec_max_model_len(algorithm: AlgorithmSpec, environment: EnvironmentSpec | None) -> int:
    """`engine_max_model_len` of a job's `spec.algorithm` and `spec.dataset.environment`: the longest conversation
    the adapter is trained on, which the engines and the serving Deployment must hold."""
    return engine_max_model_len(algorithm.max_prompt_length, algorithm.max_response_length, turns_of(environment))


def spec_max_model_len_cel(spec: str = "self") -> str:
    """`spec_max_model_len` as a CEL expression over a JobSpec (`spec`), for admission rules. The apiserver has
    applied the schema's defaults by then, so the algorithm's lengths and an environment's maxTurns are present."""
    turns = f"(has({spec}.dataset.environment) ? {spec}.dataset.environment.maxTurns : 1)"
    return f"{turns} * ({spec}.algorithm.maxPromptLength + {spec}.algorithm.maxResponseLength)"
