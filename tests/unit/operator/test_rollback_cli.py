"""`mmrl rollback`'s decisions: the previous target from the alias history, and the pins it writes."""

from __future__ import annotations

import pytest

from mmrl_operator.cli.rollback import held, pins_after, previous_target

STATUS = {
    "adapters": [{"name": "geo-v2", "job": "geo-v2"}, {"name": "geo-v3", "job": "geo-v3"}],
    "aliases": [
        {
            "name": "geo-prod",
            "job": "geo-v3",
            "history": [{"job": "geo-v1"}, {"job": "geo-v2"}, {"job": "geo-v3"}],
        },
        {"name": "fresh", "job": "only", "history": [{"job": "only"}]},
    ],
}


def test_the_previous_target_is_the_last_other_job_in_the_history() -> None:
    assert previous_target(STATUS, "geo-prod") == "geo-v2"


@pytest.mark.parametrize(("alias", "says"), [("fresh", "nothing to roll back to"), ("nope", "no alias nope")])
def test_nothing_to_roll_back_to_is_said(alias: str, says: str) -> None:
    with pytest.raises(LookupError, match=says):
        previous_target(STATUS, alias)


def test_a_pin_replaces_the_aliass_own_and_keeps_the_others() -> None:
    spec = {"aliasPins": [{"alias": "geo-prod", "job": "geo-v1"}, {"alias": "other", "job": "x"}]}
    assert pins_after(spec, "geo-prod", "geo-v2") == [
        {"alias": "other", "job": "x"},
        {"alias": "geo-prod", "job": "geo-v2"},
    ]
    assert pins_after(spec, "geo-prod", None) == [{"alias": "other", "job": "x"}]
    assert pins_after({}, "geo-prod", "geo-v2") == [{"alias": "geo-prod", "job": "geo-v2"}]


def test_a_target_the_server_does_not_hold_is_refused_and_named() -> None:
    held(STATUS, "geo-v2")  # held: the pin can be served
    with pytest.raises(LookupError, match=r"does not hold job geo-v1's adapter \(it holds: geo-v2, geo-v3\)"):
        held(STATUS, "geo-v1")  # deleted since: a pin to it would leave the alias where it is
    with pytest.raises(LookupError, match=r"\(it holds: nothing\)"):
        held({}, "geo-v2")
