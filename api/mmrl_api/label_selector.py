"""Kubernetes' label selector (`metav1.LabelSelector`): the model the apiserver checks, and `matches`, which reads it
as Kubernetes does (apimachinery's `LabelSelectorAsSelector`): every matchLabels pair and every matchExpressions
requirement must hold, and an empty selector matches every object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from mmrl_api.base import ApiModel, cel, cel_rules
from mmrl_api.kube_syntax import LabelValue, QualifiedName, label_map

VALUES_RULE = "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"
VALUES_CEL = "self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0"


class LabelSelectorRequirement(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": cel_rules(cel(VALUES_CEL, VALUES_RULE, ".values"))}

    key: QualifiedName  # type: ignore[valid-type]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] = Field(default_factory=list, max_length=32)  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> LabelSelectorRequirement:
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError(VALUES_RULE)
        return self

    def holds(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # NotIn: an object without the label matches, as in Kubernetes

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return self.key if self.operator == "Exists" else f"!{self.key}"
        return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"


class LabelSelector(ApiModel):
    """Which objects, by their labels: every matchLabels pair and every matchExpressions requirement must hold. `{}`
    selects every object."""

    match_labels: label_map(32) = Field(default_factory=dict)  # type: ignore[valid-type]
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=8)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.holds(labels) for r in self.match_expressions
        )

    def __str__(self) -> str:
        """As kubectl's `-l` spells it (`team=geo,stage in (prod)`); `{}` for the selector that takes everything."""
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())] + [str(r) for r in self.match_expressions]
        return ",".join(parts) or "{}"
