""" "Did you mean ...?" for a misspelt name: an unknown field (`learningrate`), or any value from a known list.

`validate_document` turns pydantic's `extra_forbidden` error into "unknown field", and the apiserver (strict field
validation) says no more. Here the model is walked along the error's location to the mapping the field was written
in, and the closest of that mapping's wire names is offered. The CRD cannot do this (CEL does not see unknown fields),
so only `mmrl validate` and the operator's own validation suggest; the path stays the one `kubectl apply` prints.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` most likely misspells: one that differs only in case, else the closest by difflib's ratio
    (at least 0.6), else None."""
    options = sorted(set(choices))
    same = [c for c in options if c.lower() == word.lower()]
    if same:
        return same[0]
    found = difflib.get_close_matches(word.lower(), [c.lower() for c in options], n=1, cutoff=0.6)
    return next((c for c in options if found and c.lower() == found[0]), None)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`"; did you mean X?"`, or "" when nothing is close."""
    match = closest(word, choices)
    return f"; did you mean {match}?" if match else ""


def _members(tp: Any) -> list[Any]:
    """The types a value of `tp` can be: Annotated unwrapped, unions split."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _members(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(tp) for m in _members(arg)]
    return [tp]


def _step(tp: Any, part: int | str) -> list[Any]:
    """The types found one location step inside `tp`: a list's items, a map's values, a model's field."""
    out: list[Any] = []
    for member in _members(tp):
        origin, args = get_origin(member), get_args(member)
        if isinstance(part, int) and origin in (list, tuple, set, frozenset) and args:
            out.append(args[0])
        elif isinstance(part, str) and origin is dict and len(args) == 2:
            out.append(args[1])
        elif isinstance(part, str) and isinstance(member, type) and issubclass(member, BaseModel):
            out += [f.annotation for name, f in member.model_fields.items() if part in (name, f.alias)]
    return out


def wire_names_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The field names (as written in YAML) of the mapping at `loc` inside `model`; [] when that is no model (a
    free-form map) or cannot be told. Location parts that are no field (pydantic's union tags and validator
    markers) are stepped over."""
    found: list[Any] = [model]
    for part in loc:
        inside = [t for tp in found for t in _step(tp, part)]
        found = inside or found
    names: list[str] = []
    for tp in found:
        for member in _members(tp):
            if (
                isinstance(member, type)
                and issubclass(member, BaseModel)
                and member.model_config.get("extra") == "forbid"
            ):
                names += [f.alias or name for name, f in member.model_fields.items()]
    return names
