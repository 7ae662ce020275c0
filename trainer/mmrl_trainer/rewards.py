"""Verifiable rewards: pure functions from (completion, ground truth, params) to a score in [0, 1].

The same functions back both backends: TRL calls them per completion, SkyRL through the skyrl-gym environment
registered in backends/skyrl.py. They are deliberately strict (the whole normalised answer must match, or the
single chosen letter/number must), so a policy cannot farm reward by listing every candidate answer.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from mmrl_api.spec import RewardSpec
from mmrl_trainer.imports import import_named

RewardFn = Callable[[str, str, Mapping[str, Any]], float]

_PUNCT = str.maketrans("", "", string.punctuation)
_LETTER = re.compile(r"(?:^|[\s(\[])([A-Za-z])(?:$|[\s).\]:,])")
_FRAC = re.compile(r"\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:/\d+)?")


def normalize(text: str) -> str:
    """Lowercase, drop punctuation and collapse whitespace: 'Red.' and ' red ' are the same answer."""
    return " ".join(text.lower().translate(_PUNCT).split())


def exact_match(completion: str, ground_truth: str, params: Mapping[str, Any] | None = None) -> float:
    """1.0 when the normalised completion equals the normalised answer (or any `|`-separated alternative)."""
    got = normalize(completion)
    return 1.0 if got and any(got == normalize(a) for a in ground_truth.split("|")) else 0.0


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, honouring nested braces."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{") - 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def multiple_choice(completion: str, ground_truth: str, params: Mapping[str, Any] | None = None) -> float:
    """1.0 when exactly one option letter is chosen and it is the right one ('B', '(b)', 'Answer: B.').

    A completion naming several letters ('A or B') scores 0: hedging must not pay.
    """
    boxed = _last_boxed(completion)
    text = boxed if boxed is not None else re.sub(r"(?i)^\s*(the\s+)?answer\s*(is)?\s*:?", "", completion)
    letters = {m.upper() for m in _LETTER.findall(f" {text.strip()} ")}
    return 1.0 if len(letters) == 1 and letters == {ground_truth.strip().strip("()").upper()} else 0.0


def _to_float(token: str) -> float | None:
    token = token.replace(",", "").replace("$", "").strip()
    try:
        if "/" in token:
            num, den = token.split("/", 1)
            return float(num) / float(den)
        return float(token)
    except (ValueError, ZeroDivisionError):
        return None


def _flag(value: object) -> bool:
    """A boolean parameter written as YAML `true` or as the string "true"."""
    return value if isinstance(value, bool) else str(value).strip().lower() == "true"


def numeric(completion: str, ground_truth: str, params: Mapping[str, Any] | None = None) -> float:
    """1.0 when the answer (last \\boxed{} if present, else the last number) is within tolerance of the truth.

    params: `tolerance` (relative, default 1e-6; absolute below 1), `require_boxed` ("true" → unboxed scores 0).
    """
    params = params or {}
    tol = float(params.get("tolerance", 1e-6))
    boxed = _last_boxed(completion)
    if boxed is None and _flag(params.get("require_boxed", False)):
        return 0.0
    source = _FRAC.sub(r"\1/\2", boxed if boxed is not None else completion)
    numbers = _NUMBER.findall(source.replace(",", ""))
    if not numbers:
        return 0.0
    got, want = _to_float(numbers[-1]), _to_float(ground_truth)
    if got is None or want is None or not math.isfinite(got):
        return 0.0
    return 1.0 if abs(got - want) <= tol * max(1.0, abs(want)) else 0.0


BUILTIN: dict[str, RewardFn] = {"exact_match": exact_match, "multiple_choice": multiple_choice, "numeric": numeric}


def load_custom(function: str) -> RewardFn:
    """Import `package.module:function`; errors say which part is missing."""
    return import_named(function, "dataset.reward.function", callable, "callable")


def resolve(spec: RewardSpec) -> Callable[[str, str], float]:
    """The configured reward as `score(completion, ground_truth) -> float`, params bound, result clamped to [0, 1]."""
    fn = load_custom(spec.function) if spec.name == "custom" and spec.function else BUILTIN[spec.name]
    params = dict(spec.params)

    def score(completion: str, ground_truth: str) -> float:
        value = float(fn(completion, ground_truth, params))
        return 0.0 if math.isnan(value) else min(1.0, max(0.0, value))

    return score
