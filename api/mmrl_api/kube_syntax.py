"""Kubernetes' own syntax for the values mmrl copies onto pods: label values, qualified names (label, annotation,
node-selector and toleration keys), DNS subdomains, and the label/annotation/node-selector maps built from them.

A value the apiserver would refuse on a RayCluster or Deployment must be refused on the job instead: otherwise
the job is admitted and then fails in the operator, after the tenant has left, with an error on an object the
tenant may not even be allowed to read. The regexes are Kubernetes' (apimachinery's validation package), with
the length limits folded in where a regex can say them.
"""

from __future__ import annotations

from typing import Any

from mmrl_api.base import Quantity
from mmrl_api.rules import Rule, checked_map, string_map, text

LABEL_VALUE_MAX = 63
QUALIFIED_NAME_MAX = 253 + 1 + 63  # DNS-subdomain prefix, '/', name
DNS_SUBDOMAIN_MAX = 253
ANNOTATION_VALUE_MAX = 4096
MAX_ANNOTATIONS = 32
# Kubernetes' limit on all of an object's annotations together (keys and values).
ANNOTATIONS_TOTAL_MAX = 256 * 1024

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"

LABEL_VALUE = Rule(
    rf"^({_NAME})?$",
    "must be a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
    "digit (or empty)",
)
QUALIFIED_NAME = (
    Rule(
        rf"^({_SUBDOMAIN}/)?{_NAME}$",
        "must be a qualified name: an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, "
        "'-', '_' or '.', starting and ending with a letter or digit",
    ),
    Rule(r"^([^/]{1,253}/)?[^/]*$", "must have a prefix (before '/') of at most 253 characters"),
)
DNS_SUBDOMAIN = Rule(
    rf"^{_SUBDOMAIN}$", "must be a DNS subdomain: lowercase letters, digits, '-' and '.', starting and ending alike"
)

LabelValue: Any = text(LABEL_VALUE_MAX, LABEL_VALUE)
"""A label value (also what a node selector matches and a toleration compares)."""
NonEmptyLabelValue: Any = text(LABEL_VALUE_MAX, LABEL_VALUE, min_length=1)
QualifiedName: Any = text(QUALIFIED_NAME_MAX, *QUALIFIED_NAME)
"""A label, annotation, node-selector or toleration key."""
ObjectName: Any = text(DNS_SUBDOMAIN_MAX, DNS_SUBDOMAIN, min_length=1)
"""The name of a Secret, PriorityClass or similar object."""


def label_map(max_properties: int) -> Any:
    """Labels or a node selector: qualified-name keys, label values."""
    return string_map(max_properties, LABEL_VALUE_MAX, QUALIFIED_NAME, (LABEL_VALUE,))


def annotation_map() -> Any:
    """Annotations: qualified-name keys, free values. The limits keep every possible map under Kubernetes'
    256 KiB total (MAX_ANNOTATIONS * (QUALIFIED_NAME_MAX + ANNOTATION_VALUE_MAX)), so no sum is computed."""
    return string_map(MAX_ANNOTATIONS, ANNOTATION_VALUE_MAX, QUALIFIED_NAME)


def resource_map(max_properties: int) -> Any:
    """Resource requests or limits: qualified-name keys (cpu, memory, vpc.amazonaws.com/efa), quantities."""
    return checked_map(Quantity, max_properties, QUALIFIED_NAME)
