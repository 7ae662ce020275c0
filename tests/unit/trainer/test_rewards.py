"""Verifiable rewards: strict enough that hedging or repeating answers earns nothing."""

from __future__ import annotations

import pytest

from mmrl_api.spec import RewardSpec
from mmrl_trainer import rewards


@pytest.mark.parametrize(
    ("completion", "truth", "want"),
    [
        ("red", "red", 1.0),
        ("Red.", "red", 1.0),
        ("  RED  ", "red", 1.0),
        ("red red", "red", 0.0),
        ("the red", "red", 0.0),
        ("red or blue", "red", 0.0),
        ("blue", "red", 0.0),
        ("", "red", 0.0),
        ("grey", "gray|grey", 1.0),
    ],
)
def test_exact_match_scores_only_the_whole_normalised_answer(completion: str, truth: str, want: float) -> None:
    assert rewards.exact_match(completion, truth) == want


@pytest.mark.parametrize(
    ("completion", "want"),
    [
        ("B", 1.0),
        ("(b)", 1.0),
        ("The answer is B.", 1.0),
        ("Answer: (B)", 1.0),
        (r"so \boxed{B}", 1.0),
        ("A", 0.0),
        ("A or B", 0.0),
        ("A B C D", 0.0),
        ("Because of the figure", 0.0),
    ],
)
def test_multiple_choice_requires_exactly_one_correct_letter(completion: str, want: float) -> None:
    assert rewards.multiple_choice(completion, "B") == want


@pytest.mark.parametrize(
    ("completion", "truth", "params", "want"),
    [
        (r"the area is \boxed{12}", "12", {}, 1.0),
        (r"\boxed{12.00001}", "12", {"tolerance": "1e-4"}, 1.0),
        (r"\boxed{12.1}", "12", {"tolerance": "1e-4"}, 0.0),
        (r"\boxed{\frac{1}{2}}", "0.5", {}, 1.0),
        (r"\boxed{-\dfrac{3}{4}}", "-0.75", {}, 1.0),
        (r"first 3 then \boxed{7} and 9", "7", {}, 1.0),  # boxed wins over the last number
        ("so 3 then 7", "7", {}, 1.0),
        ("so 7", "7", {"require_boxed": "true"}, 0.0),
        ("so 7", "7", {"require_boxed": True}, 0.0),
        ("so 7", "7", {"require_boxed": False}, 1.0),
        (r"\boxed{12.00001}", "12", {"tolerance": 1e-4}, 1.0),
        ("1,234", "1234", {}, 1.0),
        ("no number", "7", {}, 0.0),
        (r"\boxed{x}", "7", {}, 0.0),
    ],
)
def test_numeric_reads_boxed_or_last_number_within_tolerance(completion, truth, params, want) -> None:
    assert rewards.numeric(completion, truth, params) == want


def test_custom_reward_is_imported_by_path_and_clamped() -> None:
    spec = RewardSpec(name="custom", function="tests.unit.trainer.custom_reward:length_bonus", params={"scale": "5"})
    score = rewards.resolve(spec)
    assert score("abc", "x") == 1.0  # 3 * 5 clamped to 1
    assert score("", "x") == 0.0


def test_custom_reward_with_missing_module_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"dataset\.reward\.function.*no_such_module"):
        rewards.resolve(RewardSpec(name="custom", function="no_such_module:fn"))


def test_resolve_binds_params_of_builtin_rewards() -> None:
    loose = rewards.resolve(RewardSpec(name="numeric", params={"tolerance": "0.1"}))
    strict = rewards.resolve(RewardSpec(name="numeric"))
    assert (loose(r"\boxed{1.05}", "1"), strict(r"\boxed{1.05}", "1")) == (1.0, 0.0)


def test_params_are_strings_that_the_rewards_parse() -> None:
    import yaml

    doc = yaml.safe_load('name: numeric\nparams: {tolerance: "0.1", require_boxed: "true"}')
    spec = RewardSpec.model_validate(doc)
    score = rewards.resolve(spec)
    assert (score(r"\boxed{1.05}", "1"), score("1.05", "1")) == (1.0, 0.0)


def test_params_that_are_not_strings_are_rejected_naming_the_key() -> None:
    # Typed as strings so that admission (CEL) can check them for credentials; see mmrl_api.environment.TaskParams.
    with pytest.raises(ValueError, match=r"params\.tolerance\n.*0\.1 must be a string: quote numbers"):
        RewardSpec.model_validate({"name": "numeric", "params": {"tolerance": 0.1}})
    with pytest.raises(ValueError, match=r"params\.tolerance\n.*\[0\.1\] must be a string"):
        RewardSpec.model_validate({"name": "numeric", "params": {"tolerance": [0.1]}})
