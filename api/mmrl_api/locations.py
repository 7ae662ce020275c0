"""Where a job's data lives and where its volumes go: S3 URIs, pvc:// URIs, sub-paths inside a volume, and mount
paths inside the pods, as rules that pydantic and the apiserver both enforce (`mmrl_api.rules`).

Every one of these strings ends up in a command line, a SkyRL override or a pod's volume list. A `..` segment
would leave the tenant's directory on a shared volume, a mount path on /dev/shm or the trainer config would
hide what the operator mounts there, and an S3 key with spaces, quotes or `$` means something else to a shell
or to OmegaConf than it does to S3. So only S3's "safe" key characters, normalised absolute mount paths that
stay clear of the operator's own mounts, and relative sub-paths without `..` are admitted.
"""

from __future__ import annotations

import re

from mmrl_api.constants import RESERVED_MOUNT_PATHS
from mmrl_api.rules import Rule

S3_BUCKET = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
S3_KEY_CHARS = r"[A-Za-z0-9!_.*'()/-]"
S3_URI = Rule(
    rf"^s3://{S3_BUCKET}(/{S3_KEY_CHARS}*)?$",
    "must be s3://bucket/key: a bucket of 3 to 63 lowercase letters, digits, '.' and '-', and a key of "
    "letters, digits and !-_.*'()/ (S3's safe characters: no spaces, quotes, '$', '{', '#' or '\\')",
    only_if=r"^s3://",
)
NO_PARENT_SEGMENT = Rule(r"(^|/)\.\.(/|$)", "must not contain a '..' path segment", must_match=False)
PVC_URI = Rule(
    r"^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(/|$)",
    "must be pvc://claim/path with the claim's name (a DNS subdomain) first",
    only_if=r"^pvc://",
)
URI_RULES = (S3_URI, PVC_URI, NO_PARENT_SEGMENT)
"""Rules of every field that may hold an s3:// or pvc:// URI (model, dataset, checkpoint)."""

DATA_SCHEMES = ("s3://", "pvc://", "hf://", "synthetic://")
DATA_URI_PUNCTUATION = "._/:@?=&+-"
DATA_URI = rf"^({'|'.join(DATA_SCHEMES)}|/)[A-Za-z0-9{DATA_URI_PUNCTUATION}]+$"
"""A dataset's train or validation location: a URI with a scheme the trainer reads, or an absolute path."""
DATA_FORMS = (
    "s3://bucket/key, pvc://claim/path, hf://org/name, synthetic://NAME (the built-in tasks) or an absolute path "
    "inside the trainer image (/data/train.parquet)"
)


def data_uri_problem(value: str) -> str:
    """What is wrong with a dataset location that does not match DATA_URI, in words rather than the regex."""
    prefix = next((p for p in (*DATA_SCHEMES, "/") if value.startswith(p)), None)
    if prefix is None and "://" in value:
        scheme = value.split("://", 1)[0]
        return f"{value!r}: the trainer reads no {scheme}:// locations; use {DATA_FORMS}"
    if prefix is None:
        return f"{value!r} has no scheme; the trainer reads {DATA_FORMS}"
    rest = value[len(prefix) :]
    if not rest:
        return f"{value!r} names nothing after {prefix}; the trainer reads {DATA_FORMS}"
    odd = sorted({ch for ch in rest if not (ch.isascii() and (ch.isalnum() or ch in DATA_URI_PUNCTUATION))})
    if not odd:
        return f"{value!r} does not have the expected form (pattern {DATA_URI})"
    return (
        f"{value!r} has {', '.join(repr(ch) for ch in odd)} after {prefix}, where only letters, digits and "
        f"{DATA_URI_PUNCTUATION} are accepted"
    )


PATTERN_MESSAGES = {DATA_URI: data_uri_problem}
"""How validation explains a value that does not match a pattern, by pattern; the apiserver prints the regex."""

SUB_PATH = (
    Rule(r"^[A-Za-z0-9._-][A-Za-z0-9._/-]*$", "must be a relative path of letters, digits, '.', '_', '-' and '/'"),
    NO_PARENT_SEGMENT,
)


def _clear_of(reserved: str, what: str) -> Rule:
    """A mount path may be neither `reserved`, nor inside it, nor one of its parents (which would hide it)."""
    parts = reserved.strip("/").split("/")
    parents = ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]
    alternatives = "|".join(re.escape(p) for p in parents)
    alternatives = f"{re.escape(reserved)}(/.*)?|{alternatives}"
    return Rule(
        f"^({alternatives})$",
        f"must not be {reserved}, inside it or one of its parents: {what} is mounted there",
        must_match=False,
    )


MOUNT_PATH = (
    Rule(r"^(/|(/[A-Za-z0-9._-]+)+)$", "must be an absolute path without '//' or a trailing '/'"),
    Rule(r"(^|/)\.\.?(/|$)", "must not contain a '.' or '..' segment", must_match=False),
    *(_clear_of(path, what) for path, what in RESERVED_MOUNT_PATHS.items()),
)
