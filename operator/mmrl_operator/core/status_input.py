"""The job's status as read back: the operator wrote most of it, but the trainer (tenant code, with a patch right on
the status subresource) writes `progress` and `adapter`, and anything with that right can write any of it.

`split_status` keeps what validates and drops the rest, field by field, so a malformed report costs that job a
condition and a Warning, never a failed pass, and never a spec marked invalid for something the spec did not say.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from pydantic import ValidationError

from mmrl_api.status import JobStatus

MAX_ROUNDS = 64  # each round drops the first field pydantic names, so list indices stay right
MAX_PROBLEMS = 5


def _path(loc: tuple[int | str, ...]) -> str:
    out = "status"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _drop(status: dict[str, Any], loc: tuple[int | str, ...]) -> None:
    """Remove the field at most two levels deep along `loc` (a progress or adapter field, an attempts entry, or a
    top-level key): the smallest unit that still leaves a status the decision understands."""
    node: Any = status
    keep = loc[:2]
    for part in keep[:-1]:
        node = node[part] if isinstance(node, dict | list) else None
    if isinstance(node, dict):
        node.pop(keep[-1], None)  # type: ignore[arg-type]
    elif isinstance(node, list) and isinstance(keep[-1], int) and keep[-1] < len(node):
        node.pop(keep[-1])
    else:
        status.pop(loc[0], None)  # type: ignore[arg-type]


def split_status(raw: Any) -> tuple[dict[str, Any], list[str]]:
    """(the status with every field that does not validate removed, one line per removed field)."""
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return {}, [f"status: {type(raw).__name__} is not an object"]
    status, problems = copy.deepcopy(raw), []
    for _ in range(MAX_ROUNDS):
        try:
            JobStatus.model_validate(status)
            return status, problems[:MAX_PROBLEMS]
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = tuple(err["loc"])
            if not loc:
                return {}, [*problems, "status: not a valid status"][:MAX_PROBLEMS]
            problems.append(f"{_path(loc)}: {err['msg']}")
            before = copy.deepcopy(status)
            with contextlib.suppress(KeyError, IndexError, TypeError):
                _drop(status, loc)
            if status == before:  # a required field is missing: the object that lacks it goes
                status.pop(loc[0], None)  # type: ignore[arg-type]
    return {}, [*problems, "status: could not be repaired"][:MAX_PROBLEMS]
