"""Import what a spec names as `package.module:name` (a custom reward function or environment class)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from mmrl_trainer.errors import InvalidInput


def import_named(path: str, what: str, check: Callable[[Any], bool], kind: str) -> Any:
    """The object at `path`; errors name the spec field `what` and say whether the module or the `kind` is missing."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise InvalidInput(f"{what}: cannot import module {module_name!r}: {err}") from err
    found = getattr(module, attr, None)
    if not check(found):
        raise InvalidInput(f"{what}: {module_name!r} has no {kind} {attr!r}")
    return found
