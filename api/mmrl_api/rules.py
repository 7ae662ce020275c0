"""String rules written once and enforced twice: by pydantic (`mmrl validate`, the operator) and by the apiserver.

A `Rule` is a regular expression a value must (or must not) contain, optionally only when it contains another
one (`only_if`). `text(...)` turns limits and rules into a pydantic type: its validator raises the rule's
message, and its JSON Schema carries `maxLength` and the same regexes as CEL `matches` rules, which the CRD
generator keeps. `string_map(...)` does the same for a map's keys and values, as one rule on the map (CEL can
only see a map's keys from the map). The regexes stay in the subset where RE2 (CEL) and Python's `re` agree:
no lookaround, no backreferences, `(?i)` only as a leading flag.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from mmrl_api.base import cel, cel_rules


def _python(regex: str) -> str:
    """The regex for Python's `re`, where `$` also matches before a final newline; RE2's `$` (no multi-line
    flag) is the end of the text, which is Python's `\\Z`. The rules use `$` only as that anchor."""
    return re.sub(r"(?<!\\)\$", r"\\Z", regex)


def cel_str(value: str) -> str:
    """`value` as a double-quoted CEL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Rule:
    regex: str
    message: str
    must_match: bool = True
    only_if: str | None = None
    """The rule applies only to values that contain this regex (e.g. `^s3://`)."""

    def holds(self, value: str) -> bool:
        if self.only_if is not None and not re.search(_python(self.only_if), value):
            return True
        return bool(re.search(_python(self.regex), value)) == self.must_match

    def cel(self, var: str = "self") -> str:
        test = f"{'' if self.must_match else '!'}{var}.matches({cel_str(self.regex)})"
        return f"(!{var}.matches({cel_str(self.only_if)}) || {test})" if self.only_if else test


def broken(value: str, rules: tuple[Rule, ...]) -> str | None:
    """The message of the first rule `value` breaks, or None."""
    return next((r.message for r in rules if not r.holds(value)), None)


def _checker(rules: tuple[Rule, ...], hint: Callable[[str], str] | None = None):  # type: ignore[no-untyped-def]
    def check(value: str) -> str:
        message = broken(value, rules)
        if message is not None:
            raise ValueError(f"{value!r} {message}{hint(value) if hint else ''}")
        return value

    return check


def text(
    max_length: int,
    *rules: Rule,
    min_length: int = 0,
    pattern: str | None = None,
    hint: Callable[[str], str] | None = None,
) -> Any:
    """A string type with a length limit and rules, enforced by pydantic and (as CEL) by the apiserver. `hint`
    adds to the message of a broken rule what only Python can say about the value (a "did you mean")."""
    extra = cel_rules(*(cel(r.cel(), r.message) for r in rules)) if rules else None
    return Annotated[
        str,
        Field(min_length=min_length, max_length=max_length, pattern=pattern, json_schema_extra=extra),
        AfterValidator(_checker(rules, hint)),
    ]


def _map_checker(key_rules: tuple[Rule, ...], value_rules: tuple[Rule, ...]):  # type: ignore[no-untyped-def]
    def check(mapping: dict[str, Any]) -> dict[str, Any]:
        for key, value in mapping.items():
            message = broken(key, key_rules)
            if message is not None:
                raise ValueError(f"key {key!r} {message}")
            message = broken(value, value_rules) if isinstance(value, str) else None
            if message is not None:
                raise ValueError(f"value {value!r} of {key!r} {message}")
        return mapping

    return check


def _string_only(hint: str):  # type: ignore[no-untyped-def]
    def check(value: object) -> object:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} must be a string{hint}")
        return value

    return check


def checked_map(
    value_type: Any, max_properties: int, key_rules: tuple[Rule, ...], value_rules: tuple[Rule, ...] = ()
) -> Any:
    """A map whose keys (and string values) follow rules; the CEL rules sit on the map (they name the map)."""
    rules = [cel(f"self.all(k, {r.cel('k')})", f"every key {r.message}") for r in key_rules]
    rules += [cel(f"self.all(k, {r.cel('self[k]')})", f"every value {r.message}") for r in value_rules]
    return Annotated[
        dict[str, value_type],
        Field(max_length=max_properties, json_schema_extra=cel_rules(*rules)),
        AfterValidator(_map_checker(key_rules, value_rules)),
    ]


def string_map(
    max_properties: int,
    max_value_length: int,
    key_rules: tuple[Rule, ...],
    value_rules: tuple[Rule, ...] = (),
    not_a_string: str = "",
) -> Any:
    """A map of strings whose keys and values follow rules. `not_a_string` is added to the message for a value
    of another type."""
    value = Annotated[str, BeforeValidator(_string_only(not_a_string)), Field(max_length=max_value_length)]
    return checked_map(value, max_properties, key_rules, value_rules)
