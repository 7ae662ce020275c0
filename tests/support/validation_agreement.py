"""Do `mmrl validate` and the apiserver agree? Generate job specs and compare the two verdicts on every one.

Specs are mutations of examples/*.yaml: hypothesis picks up to three fields anywhere in the spec (any depth,
list items and map values included, plus metadata.name) and sets each to a value drawn from a strategy built
from that field's schema, which the CRD generator derives from the pydantic models: values inside and just
outside the limits, the field's own pattern, strings chosen to trip the admission rules (paths, URIs, label
syntax, credentials), other JSON types, or deletion. `validate_as_apiserver` (what `mmrl validate` checks before
the GPU memory plan, which no CEL rule can compute and the operator checks instead) gives one verdict; a server-side
dry-run create (`dryRun=All`, strict field validation) against the installed CRD gives the other. Used by
tests/cluster/test_validation_agreement.py (a few hundred specs) and bench/validation_agreement.py (thousands).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from kubernetes import client

from mmrl_api import JobSpec, validate_as_apiserver
from mmrl_api import constants as c
from mmrl_operator.codegen import crd
from tests.support.corpus import example

Path = tuple[str | int, ...]
DELETE = object()
EXAMPLES = ("job.yaml", "local.yaml")

# Strings that sit on either side of an admission rule; the field's own pattern and limits add the rest.
# fmt: off
TRICKY = [
    "", " ", "a b", "$HOME", "${oc.env:X}", "{a}", "a,b", "[a]", "a'b", 'a"b', "a\\b", "a#b", "é", "a\n", "\t", "..",
    "../x", "a/../b", "a/..", "./a", "a..b", "/", "//", "/a/", "/a//b", "/a/./b", "/a/../b", "fsx", "/fsx",
    "/fsx/ckpt", "/dev", "/dev/shm", "/dev/shm/x", "/etc", "/etc/mmrl", "/etc/mmrl2", "/tmp", "/tmp/x", "/tmpx",
    "/mnt", "/mnt/pvc", "/mnt/pvc/a", "/mnt/pvcs", "/mnt/adapter", "mmrl", "runs/2024.05", "/models/../etc",
    "s3://b", "s3://abc", "s3://my-bucket", "s3://my-bucket/", "s3://my-bucket/k", "s3://My-Bucket/k",
    "s3://my_bucket/k", "s3://my-bucket/a b", "s3://my-bucket/a$b", "s3://my-bucket/../k", "s3://my-bucket/a..b",
    "s3://my-bucket/(a)*!'.x", "s3://my-bucket/a?v=1", "s3://my-bucket/a@b", "s3://-bucket/k", "s3://a.b/k",
    "pvc://claim/x", "pvc://claim", "pvc://Claim/x", "pvc://a.b/x", "pvc://claim/../x", "pvc://-c/x",
    "hf://org/name", "hf://org/../x", "Qwen/Qwen3-VL-8B-Instruct", "synthetic://colors", "http://x/y", "q_proj",
    "mlp.down_proj", "layers.0.q_proj", "lm_head", "model.embed_tokens", "q-proj", "_x", "1abc", "a.", ".a", "a..b",
    "example.com/key", "Example.com/key", "a/b/c", "/a", "a/", "-a", "a-", "a_b.c", "A.b-C_9", "x" * 63, "x" * 64,
    "a" * 254 + "/b", "a" * 253 + "/b", "HF_TOKEN", "TOKENIZERS_PARALLELISM", "DB_PASSWORD", "DATABASE_URL",
    "MY_KEY", "KEY", "SMTP_PASS", "BYPASS", "api_token", "tokens", "Secret_Name", "https://u:p@host",
    "redis://:pw@h:6379", "https://host:8080/x", "user@example.com", "a://b:@c", "NoExecute", "NoSchedule",
    "PreferNoSchedule", "Exists", "Equal", "true", "1e-4", "16Gi", "500m", "lots", "0", "-1", "1.2.3",
    "\u0661.\u0662.\u0663", "my.rewards:score", "ml.p5.48xlarge", "custom", "numeric", "grpo", "head", "Team-Queue",
    "p5.48xlarge", "ml.g6e.12xlarge", "ml.g5.xlarge", "ml.p5.48xlarg", "ML.P5.48XLARGE", "ml.m5.12xlarge",
    "ml.p6e-gb200.36xlarge", "g6e.12xl",
]
# fmt: on
OTHER_TYPES = ["x", 0, 1, -1, 1.5, 2.0, True, False, None, [], {}, ["a"], {"a": "b"}]


def _strings(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    limit = node.get("maxLength", 64)
    options = [st.sampled_from(TRICKY), st.sampled_from([limit, limit + 1]).map(lambda n: "a" * n)]
    if "enum" in node:
        options.append(st.sampled_from(node["enum"]))
    if "pattern" in node:
        options.append(st.from_regex(node["pattern"], fullmatch=True).map(lambda s: s[: limit + 1]))
    alphabet = st.sampled_from("abcXYZ019._-/:@$ {},é\n")
    options.append(st.text(alphabet, max_size=12))
    return st.one_of(options)


def _numbers(node: dict[str, Any], integer: bool) -> st.SearchStrategy[Any]:
    low, high = node.get("minimum", -(10**6)), node.get("maximum", 10**7)
    edges = [low - 1, low, high, high + 1]
    if integer:
        return st.one_of(st.sampled_from(edges), st.integers(low - 2, high + 2), st.sampled_from([1.0, 2.5]))
    return st.one_of(
        st.sampled_from(edges),
        st.floats(low - 1, high + 1, allow_nan=False, allow_infinity=False),
        st.integers(int(low) - 1, int(high) + 1),
    )


def values(node: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values for one schema node: mostly of its type near its limits, sometimes of another type."""
    other = st.sampled_from(OTHER_TYPES)
    if node.get("x-kubernetes-int-or-string"):
        mine: st.SearchStrategy[Any] = st.one_of(
            st.integers(-2, 10**6), st.sampled_from(["4", "500m", "16Gi", "1.5", "+1", "1e3", "lots", ""])
        )
    elif node.get("type") == "string":
        mine = _strings(node)
    elif node.get("type") in ("integer", "number"):
        mine = _numbers(node, node["type"] == "integer")
    elif node.get("type") == "boolean":
        mine = st.booleans()
    elif node.get("type") == "array":
        items = values(node["items"], depth + 1)
        mine = st.lists(items, max_size=min(node.get("maxItems", 3) + 1, 4))
    elif isinstance(node.get("additionalProperties"), dict):
        keys = st.one_of(st.sampled_from(TRICKY[:120]), st.text(st.sampled_from("ab.-_/Z9"), max_size=8))
        mine = st.dictionaries(keys, values(node["additionalProperties"], depth + 1), max_size=3)
    elif "properties" in node and depth < 2:
        props = node["properties"]
        required = set(node.get("required", []))
        mine = st.fixed_dictionaries(
            {k: values(v, depth + 1) for k, v in props.items() if k in required},
            optional={k: values(v, depth + 1) for k, v in props.items() if k not in required},
        )
    else:
        mine = st.just({})
    return st.one_of(mine, mine, mine, other)


def field_paths(node: dict[str, Any], path: Path = ()) -> list[tuple[Path, dict[str, Any]]]:
    """Every field of the schema with its node; list items appear as index 0, map values under key "k"."""
    out = [(path, node)] if path else []
    for name, child in node.get("properties", {}).items():
        out += field_paths(child, (*path, name))
    if isinstance(node.get("items"), dict):
        out += field_paths(node["items"], (*path, 0))
    if isinstance(node.get("additionalProperties"), dict):
        out += field_paths(node["additionalProperties"], (*path, "k"))
    return out


SPEC_SCHEMA = crd.model_schema(JobSpec)
NAME_NODE = {"type": "string", "maxLength": 63, "pattern": r"^[a-z]([-a-z0-9]*[a-z0-9])?$"}
PATHS = [(("metadata", "name"), NAME_NODE)] + [(("spec", *p), n) for p, n in field_paths(SPEC_SCHEMA)]


def set_path(doc: dict[str, Any], path: Path, value: Any) -> None:
    """Set (or with DELETE remove) the value at path, creating the containers on the way."""
    node: Any = doc
    for step, nxt in itertools.pairwise(path):
        container: Any = [] if isinstance(nxt, int) else {}
        if isinstance(step, int):
            while len(node) <= step:
                node.append(container)
            if not isinstance(node[step], type(container)):
                node[step] = container
        elif not isinstance(node.get(step), type(container)):
            node[step] = container
        node = node[step]
    last = path[-1]
    if isinstance(last, int):
        while len(node) <= last:
            node.append({})
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    elif value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value


@st.composite
def job_specs(draw: Callable[[st.SearchStrategy[Any]], Any]) -> dict[str, Any]:
    doc = copy.deepcopy(example(draw(st.sampled_from(EXAMPLES))))
    for _ in range(draw(st.integers(1, 3))):
        path, node = draw(st.sampled_from(PATHS))
        value = DELETE if draw(st.integers(0, 9)) == 0 else draw(values(node))
        set_path(doc, path, value)
    return doc


def generate(count: int, start_seed: int = 0) -> list[dict[str, Any]]:
    """`count` specs, the same ones for the same seed."""
    out: list[dict[str, Any]] = []
    run = start_seed
    while len(out) < count:

        @seed(run)
        @settings(
            max_examples=count - len(out),
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(job_specs())
        def collect(doc: dict[str, Any]) -> None:
            out.append(doc)

        collect()
        run += 1
    return out[:count]


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    detail: str


@dataclass(frozen=True)
class Disagreement:
    index: int
    spec: dict[str, Any]
    local: Verdict
    server: Verdict

    def __str__(self) -> str:
        body = json.dumps(self.spec.get("spec"), sort_keys=True)
        return (
            f"#{self.index}: mmrl validate {'accepts' if self.local.accepted else 'rejects'} "
            f"({self.local.detail[:300]}), apiserver {'accepts' if self.server.accepted else 'rejects'} "
            f"({self.server.detail[:300]}); name={self.spec.get('metadata', {}).get('name')!r} spec={body[:1500]}"
        )


def local_verdict(doc: dict[str, Any]) -> Verdict:
    job, errors = validate_as_apiserver(doc)
    return Verdict(job is not None, "; ".join(str(e) for e in errors))


def server_verdict(custom: client.CustomObjectsApi, namespace: str, doc: dict[str, Any]) -> Verdict:
    body = {**doc, "metadata": {**doc.get("metadata", {}), "namespace": namespace}}
    try:
        custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, body, dry_run="All", field_validation="Strict"
        )
    except client.exceptions.ApiException as err:
        if err.status not in (400, 422):
            raise
        return Verdict(False, json.loads(err.body).get("message", err.body))
    return Verdict(True, "")


@dataclass(frozen=True)
class Comparison:
    disagreements: list[Disagreement]
    server_accepted: int


def compare(api: client.ApiClient, namespace: str, specs: list[dict[str, Any]], workers: int = 4) -> Comparison:
    """Both verdicts on every spec; the disagreements about accept/reject, with both sides' messages."""
    custom = client.CustomObjectsApi(api)
    with ThreadPoolExecutor(workers) as pool:
        server = list(pool.map(lambda d: server_verdict(custom, namespace, d), specs))
    out = []
    for index, (doc, remote) in enumerate(zip(specs, server, strict=True)):
        local = local_verdict(doc)
        if local.accepted != remote.accepted:
            out.append(Disagreement(index, doc, local, remote))
    return Comparison(out, sum(v.accepted for v in server))
