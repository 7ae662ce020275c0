"""The trainer's failures, typed by what retrying would do, and the exit code each one ends the process with.

The operator retries exit 1 and fails the job at once on 2 and 3 (mmrl_api.contract), so the mapping must not
guess from the exception's type alone: `ValueError` is what our loaders, SkyRL's config checks and any bug in a
library raise alike, and `ray.exceptions.RayTaskError` re-raises a remote failure as a subclass of the remote
exception's own type (`RayTaskError.as_instanceof_cause`), so a ValueError in a Ray worker arrives as a ValueError
here. Hence: our user-facing checks raise `InvalidInput` or `InvalidConfig` by name, anything that came back from a
Ray task is an application failure (1) whatever it subclasses, and every other exception is 1.
"""

from __future__ import annotations

import sys

from mmrl_api.contract import EXIT_BAD_CONFIG, EXIT_BAD_INPUT, EXIT_FAILED


class InvalidInput(ValueError):
    """The data, model or adapter the spec names is unusable; retrying will not help (exit 3). The message names
    the spec field."""


class InvalidConfig(ValueError):
    """The job's settings cannot run as given (SkyRL rejects them, or they contradict the checkpoint being
    resumed); retrying will not help (exit 2). The message names the spec field or quotes SkyRL."""


def from_ray_task(err: BaseException) -> bool:
    """True when `err` was raised in a Ray task or actor and re-raised by `ray.get` (ray is not imported here: an
    error can only come from Ray when the process already imported it)."""
    exceptions = sys.modules.get("ray.exceptions")
    return exceptions is not None and isinstance(err, exceptions.RayTaskError)


def exit_code_for(err: BaseException) -> int:
    """The trainer's exit code for an exception that ended the run."""
    if from_ray_task(err):
        return EXIT_FAILED
    if isinstance(err, InvalidConfig):
        return EXIT_BAD_CONFIG
    if isinstance(err, InvalidInput):
        return EXIT_BAD_INPUT
    return EXIT_FAILED
