"""Shared plumbing for the API models: camelCase wire names, strict unknown-field handling, CEL annotations.

Every model of the MultimodalRLJob API derives from `ApiModel`. Field docs become CRD descriptions, and
`cel(...)` attaches a Kubernetes `x-kubernetes-validations` rule to a model or field so the CRD generator emits
it; the same rule is enforced in Python by a validator next to it (the corpus tests keep the two in step).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

CEL_KEY = "x-kubernetes-validations"
INT_OR_STRING_KEY = "x-kubernetes-int-or-string"
PRESERVE_UNKNOWN_KEY = "x-kubernetes-preserve-unknown-fields"


class ApiModel(BaseModel):
    """Base of every API model: camelCase on the wire, snake_case in Python, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        # Strict like the apiserver: "5" is not an integer and "yes" is not a boolean.
        strict=True,
        validate_default=True,
        use_attribute_docstrings=True,
    )

    def wire(self) -> dict[str, Any]:
        """The object as Kubernetes stores it: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def cel(
    rule: str,
    message: str,
    field_path: str | None = None,
    reason: str | None = None,
    message_expression: str | None = None,
) -> dict[str, str]:
    """One CEL validation rule as the CRD schema spells it. `message_expression` (CEL, evaluated only when the
    rule fails) quotes the values; the apiserver falls back to `message` when it cannot evaluate it."""
    out = {"rule": rule, "message": message}
    if message_expression:
        out["messageExpression"] = message_expression
    if field_path:
        out["fieldPath"] = field_path
    if reason:
        out["reason"] = reason
    return out


def cel_rules(*rules: dict[str, str]) -> dict[str, Any]:
    """`json_schema_extra` carrying CEL rules for a model or field."""
    return {CEL_KEY: list(rules)}


IMMUTABLE = "is immutable after creation; create a new job instead"


def immutable(what: str) -> dict[str, Any]:
    """`json_schema_extra` of a field the apiserver must never let change (a CEL transition rule)."""
    return cel_rules(cel("self == oldSelf", f"{what} {IMMUTABLE}"))


def _quantity(value: Any) -> str:
    # An integer or a string, as the CRD's int-or-string says: the apiserver reads a whole 2.0 as the integer 2
    # but refuses 1.5 (write "1.5").
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError('must be a Kubernetes quantity such as 4, "1.5", 500m, 16Gi (an integer or a string)')
    text = str(value)
    if isinstance(value, str) and len(value) > QUANTITY_MAX_LENGTH:
        raise ValueError(f"{text[:20]!r}... is longer than {QUANTITY_MAX_LENGTH} characters")
    if not QUANTITY_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity (examples: 4, 500m, 16Gi)")
    return text


# Kubernetes' quantity grammar, simplified to what people write: a signed decimal and an optional suffix.
QUANTITY_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[mkMGTPE])?$"
QUANTITY_RE = re.compile(QUANTITY_PATTERN)
QUANTITY_MAX_LENGTH = 64

Quantity = Annotated[
    str,
    BeforeValidator(_quantity),
    Field(json_schema_extra={INT_OR_STRING_KEY: True, "pattern": QUANTITY_PATTERN, "maxLength": QUANTITY_MAX_LENGTH}),
]
"""A Kubernetes resource quantity; accepts YAML integers (`cpu: 4`) like the apiserver does."""


def exactly_one_cel(a: str, b: str) -> dict[str, str]:
    """CEL for "exactly one of the optional fields a and b" (camelCase wire names)."""
    return cel(f"has(self.{a}) != has(self.{b})", f"set exactly one of {a} or {b}")


def require_exactly_one(model: BaseModel, a: str, b: str) -> None:
    """The Python side of `exactly_one_cel`, with the same message."""
    by_alias = {(f.alias or n): n for n, f in type(model).model_fields.items()}
    present = [getattr(model, by_alias[name]) is not None for name in (a, b)]
    if present[0] == present[1]:
        raise ValueError(f"set exactly one of {a} or {b}")


def not_below(value: float, data: dict[str, Any], other: str) -> float:
    """The Python side of a `self.x >= self.other` rule: `other` is the snake_case field validated before x."""
    floor = data.get(other)
    if floor is not None and value < floor:
        raise ValueError(f"{value} is below {to_camel(other)} {floor}")
    return value
