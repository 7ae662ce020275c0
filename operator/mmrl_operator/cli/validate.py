"""`mmrl validate`: check MultimodalRLJob and ModelServer files offline, with the models the CRD is generated from.

It refuses what the apiserver refuses (the error paths match what `kubectl apply` would print): the CRD's schema and
CEL, and a specPatch the chart's admission policy refuses (mmrl_api/spec_patch_rules.py, on unless
`--spec-patch-policy off`); and also a job whose GPU memory plan does not fit, which the apiserver cannot compute and
the operator refuses before creating anything. So it accepts exactly what the apiserver (with the chart's admission
policies) and the operator together accept. For each job it also prints the summary, the checkpoint footprint and
the GPU memory plan.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from mmrl_api.constants import KIND, SERVER_KIND
from mmrl_operator.cli.errors import UserError
from mmrl_operator.cli.kubeconfig import NAMESPACE_DEFAULT
from mmrl_operator.cli.sources import Source, read_sources


def _summary(job: Any, namespace: str | None, fallback: str) -> str:
    spec = job.spec
    gpus = sum(g.replicas * g.gpus for g in spec.cluster.worker_groups)
    steps = f"maxSteps {spec.algorithm.max_steps}" if spec.algorithm.max_steps else f"epochs {spec.algorithm.epochs}"
    return (
        f"{namespace or job.metadata.namespace or fallback}/{job.name}: {spec.algorithm.name} on {spec.model.name}, "
        f"LoRA r={spec.lora.rank}, {spec.trainer.backend} backend, {gpus} GPUs, {steps}"
    )


def _footprint(job: Any) -> str:
    from mmrl_api.footprint import footprint_of

    found = footprint_of(job.spec)
    return found.describe() if found else f"unknown (no parameter count for {job.spec.model.name})"


def _memory_plan(job: Any, where: str, out: TextIO) -> None:
    """Print the GPU memory plan of a job `validate_manifest` accepted (one that does not fit is refused there)."""
    from mmrl_api.hardware import closest, known
    from mmrl_api.memory_plan import spec_plan

    plan = spec_plan(job.spec)
    if plan is not None:
        for line in plan.lines(problems=False):
            print(f"{where}: {line}", file=out)
        return
    print(f"{where}: GPU memory plan: unknown (needs a reference model and a known instanceType)", file=out)
    for g in job.spec.cluster.worker_groups:
        if g.instance_type and not known(g.instance_type) and (hint := closest(g.instance_type)):
            print(
                f"{where}: note: instanceType {g.instance_type} is not in mmrl's table; did you mean {hint}?", file=out
            )


def _validate_server(doc: dict[str, Any], where: str, out: TextIO, err: TextIO) -> bool:
    from mmrl_api.model_server import validate_server_manifest

    server, errors = validate_server_manifest(doc)
    if server is None:
        for e in errors:
            print(f"{where}: {e.path}: {e.message}", file=err)
        return False
    spec = server.spec
    print(
        f"{where}: ok: ModelServer {server.name}: {spec.model.name}, {spec.replicas} replica(s), up to "
        f"{spec.max_adapters} adapters of rank <= {spec.max_lora_rank}, context {spec.max_model_len} tokens",
        file=out,
    )
    return True


def _validate_job(
    doc: Any, where: str, namespace: tuple[str | None, str], out: TextIO, err: TextIO, spec_patch_policy: bool
) -> bool:
    from mmrl_api import validate_manifest
    from mmrl_api.spec_patch_rules import violations

    job, errors = validate_manifest(doc)
    if job is None:
        for e in errors:
            print(f"{where}: {e.path}: {e.message}", file=err)
        return False
    refused = violations(doc) if spec_patch_policy else []  # the chart's admission policy, after the CRD's schema
    for _, message in refused:
        print(f"{where}: {message}", file=err)
    if refused:
        return False
    print(f"{where}: ok: {_summary(job, *namespace)}", file=out)
    print(f"{where}: checkpoint footprint: {_footprint(job)}", file=out)
    _memory_plan(job, where, out)
    return True


def validate_sources(
    sources: Sequence[Source],
    namespace: str | None,
    fallback: str,
    out: TextIO,
    err: TextIO,
    spec_patch_policy: bool = True,
) -> int:
    """Validate every MultimodalRLJob and ModelServer document; print errors with field paths. A job is named in
    `namespace` (`-n`), else its file's, else `fallback`, as `render` places it. With `spec_patch_policy` (the chart's
    default) a job's specPatch is judged as the chart's admission policy judges it. Exit status: 1 when any document
    is refused, a named file holds none, or a file is not YAML."""
    failed, checked = False, 0
    for source in sources:
        try:
            docs = source.documents()
        except UserError as exc:  # the other files are still checked
            print(exc, file=err)
            failed = True
            continue
        ours = [d for d in docs if not isinstance(d, dict) or d.get("kind", KIND) in (KIND, SERVER_KIND)]
        if not ours:
            if source.named:
                print(f"{source.name}: no {KIND} or {SERVER_KIND} documents", file=err)
                failed = True
            continue
        for index, doc in enumerate(ours):
            checked += 1
            where = source.name if len(ours) == 1 else f"{source.name}[{index}]"
            if isinstance(doc, dict) and doc.get("kind") == SERVER_KIND:
                ok = _validate_server(doc, where, out, err)
            else:
                ok = _validate_job(doc, where, (namespace, fallback), out, err, spec_patch_policy)
            failed = failed or not ok
    if not checked and not failed:
        print(f"no {KIND} or {SERVER_KIND} documents in {', '.join(s.name for s in sources)}", file=err)
        failed = True
    return 1 if failed else 0


def validate_files(
    paths: Sequence[str],
    out: TextIO | None = None,
    err: TextIO | None = None,
    namespace: str | None = None,
    fallback: str = NAMESPACE_DEFAULT,
    spec_patch_policy: bool = True,
) -> int:
    """`validate_sources` over files, directories or `-`; UserError for one that cannot be read."""
    streams = (out or sys.stdout, err or sys.stderr)
    return validate_sources(read_sources(paths), namespace, fallback, *streams, spec_patch_policy=spec_patch_policy)
