"""A dataset's multi-turn task: an environment the policy acts in, turn after turn, instead of a one-shot reward.

Each row of an environment's dataset starts one episode (its `seed` picks the episode); the environment shows an
observation (text, and an image when `observation.images`), reads the model's reply as an action, and scores the
whole episode itself, so a dataset names an environment or a reward, never both. The shape follows RewardSpec:
a built-in by name, or `name: custom` with an importable `class`, and string params (so admission can refuse a
credential passed as one). `name: skyrl-gym` names a SkyRL-Gym environment class instead (a `BaseTextEnv` subclass,
such as SkyRL's VisGym example), which the SkyRL backend registers with skyrl_gym as it is, params as its
registration kwargs and the dataset's extra columns as each episode's extras; the local backend cannot run one.
Rules are written twice, as CEL and as pydantic validators, like the rest of the spec.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from mmrl_api.base import ApiModel, cel, cel_rules
from mmrl_api.credentials import NO_URL_WITH_PASSWORD, NOT_A_CREDENTIAL_NAME
from mmrl_api.rules import string_map

# `package.module:name`, importable in the trainer image (a reward function or an environment class).
IMPORT_PATH = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
# SkyRL's walkthrough recipe lets the VisGym maze run 15 turns; 64 keeps an episode's context (every turn's image
# stays in it) within what one sequence can hold.
DEFAULT_MAX_TURNS = 15
MAX_TURNS = 64

# Task params are strings (`tolerance: "1e-4"`, `size: "5"`; the reward or environment parses them). They used to
# be untyped scalars, but the apiserver hides an untyped value, and the keys of a map of them, from CEL, so
# admission could not refuse a credential passed as a param; typed as strings, it can.
TaskParams = string_map(
    16,
    1024,
    (NOT_A_CREDENTIAL_NAME,),
    (NO_URL_WITH_PASSWORD,),
    not_a_string=': quote numbers and booleans ("1e-4", "true")',
)

EnvironmentName = Literal["maze", "custom", "skyrl-gym"]
# The names whose environment is a class the job names (`class`): ours (the episode interface) or SkyRL-Gym's.
CLASS_NAMES = ("custom", "skyrl-gym")
# The local backend plays episodes through mmrl's own episode interface; a SkyRL-Gym class runs only inside SkyRL.
# The message of the job rule that refuses the pair (spec.trainer.backend), and of the local backend's refusal.
LOCAL_CANNOT_RUN_SKYRL_GYM = (
    "local cannot run a skyrl-gym environment (dataset.environment.name: skyrl-gym): it needs SkyRL's generator; "
    "use backend skyrl, or an environment of name custom (mmrl's episode interface)"
)


def custom_only(field: str, names: tuple[str, ...] = ("custom",)) -> str:
    """The message of the rule "`field` is set exactly when name is one of `names`" (a reward's or an
    environment's)."""
    return f"{field} is required when name is {' or '.join(names)}, and only then"


def names_cel(names: tuple[str, ...]) -> str:
    """CEL for "self.name is one of `names`"."""
    return " || ".join(f"self.name == '{name}'" for name in names)


def require_iff_custom(
    value: str | None, info: ValidationInfo, field: str, names: tuple[str, ...] = ("custom",)
) -> str | None:
    """The Python side of `(<self.name is one of names>) == has(self.<field>)`; `name` is validated before
    `field`."""
    if "name" in info.data and (info.data["name"] in names) != (value is not None):
        raise ValueError(custom_only(field, names))
    return value


class ObservationSpec(ApiModel):
    """What the policy is shown after each of its actions."""

    images: bool = True
    """Each turn's observation carries an image (the maze drawn as a picture); false shows it as text only.
    Every earlier turn's image stays in the episode's conversation, so an episode's images add up in its context."""


class EnvironmentSpec(ApiModel):
    """A multi-turn environment: built-in by name, `name: custom` with a `class` importable in the trainer, or
    `name: skyrl-gym` with a SkyRL-Gym environment class."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_rules(
            cel(
                f"({names_cel(CLASS_NAMES)}) == has(self.class)",
                custom_only("class", CLASS_NAMES),
                ".class",
            ),
        )
    }

    name: EnvironmentName = "maze"
    """Built-in environment: maze (a small grid maze drawn each turn; actions up/down/left/right; reward for
    reaching the goal in few moves), custom (a class implementing mmrl's episode interface, see class), or
    skyrl-gym (a SkyRL-Gym BaseTextEnv class, registered with SkyRL as it is; SkyRL backend only)."""
    class_path: str | None = Field(default=None, alias="class", max_length=256, pattern=IMPORT_PATH)
    """For name=custom: `package.module:Class` importable in the trainer image, implementing the episode
    interface of mmrl_trainer.envs (reset(seed) and step(action)). For name=skyrl-gym: a skyrl_gym BaseTextEnv
    subclass (`__init__(env_config, extras, **params)`, `init(prompt)`, `step(text)`), which SkyRL builds per
    episode with the row's extra dataset columns as `extras`."""
    params: TaskParams = Field(default_factory=dict)  # type: ignore[valid-type]
    """Environment parameters, as strings: e.g. {size: "5"} for maze; for skyrl-gym, the class's keyword arguments
    (skyrl_gym.envs.register kwargs). Never credentials: an environment that needs one reads it from trainer.env
    (valueFrom.secretKeyRef)."""
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1, le=MAX_TURNS)
    """Actions per episode at most; an episode that has not ended by then ends unrewarded. A skyrl-gym environment
    receives it as extras["max_turns"] and is trusted to end its episodes by then."""
    observation: ObservationSpec = Field(default_factory=ObservationSpec)
    """What each turn's observation carries (built-in and custom environments; a skyrl-gym environment makes its
    own observations)."""

    @field_validator("class_path")
    @classmethod
    def _class_iff_named(cls, class_path: str | None, info: ValidationInfo) -> str | None:
        return require_iff_custom(class_path, info, "class", CLASS_NAMES)
