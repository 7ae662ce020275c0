"""One seed for every property test in a run: fixed in CI, random elsewhere, printed in the header either way.

In CI (``CI=true``) hypothesis runs from seed 0 (not from its own CI profile, which derandomizes by test name
and so cannot be moved to other examples) and without its example database, so a red run is the same run
when repeated on a fresh clone, and a green one is not green by luck of the draw. ``MMRL_HYPOTHESIS_SEED=<n>``
picks another seed to explore more (in CI or not); without it, a developer's run draws a fresh seed each time.
The header line names the seed, so any run can be replayed with it.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.ci_strict import in_ci

ENV = "MMRL_HYPOTHESIS_SEED"
CI_SEED = 0


def chosen_seed() -> int:
    if os.environ.get(ENV):
        return int(os.environ[ENV])
    return CI_SEED if in_ci() else random.SystemRandom().randrange(2**32)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before hypothesis's own pytest_configure, which reads --hypothesis-seed; an explicit option still wins.
    if config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(chosen_seed())
    from hypothesis import settings

    # Hypothesis's own CI profile derandomizes by each test's name, which no seed changes; ours draws from the
    # seed above instead, and in CI without the example database, whose replays would differ between machines.
    settings.register_profile("mmrl", derandomize=False, **({"database": None} if in_ci() else {}))
    settings.load_profile("mmrl")


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption("hypothesis_seed", None)
    return f"property tests: hypothesis seed {seed} (replay or explore with {ENV}=<n>)"
