"""`mmrl` command line: validate and render job files offline, inspect a job on the cluster, run the operator.

`mmrl validate` uses exactly the models the CRD is generated from, so a file it accepts is one the apiserver
accepts (and the error paths match what `kubectl apply` would print). Commands that need a cluster import the
Kubernetes client lazily, so validation works without it.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from pathlib import Path

from mmrl_api.constants import KIND, SERVER_KIND
from mmrl_operator.cli.bounded_mlflow import DEFAULT_BUDGET, budget_seconds


def _summary(job) -> str:  # type: ignore[no-untyped-def]
    spec = job.spec
    gpus = sum(g.replicas * g.gpus_per_node for g in spec.cluster.worker_groups)
    steps = f"maxSteps {spec.algorithm.max_steps}" if spec.algorithm.max_steps else f"epochs {spec.algorithm.epochs}"
    return (
        f"{job.namespace}/{job.name}: {spec.algorithm.name} on {spec.model.name}, LoRA r={spec.lora.rank}, "
        f"{spec.trainer.backend} backend, {gpus} GPUs, {steps}"
    )


def _footprint(job) -> str:  # type: ignore[no-untyped-def]
    from mmrl_api.footprint import footprint_of

    found = footprint_of(job.spec)
    return found.describe() if found else f"unknown (no parameter count for {job.spec.model.name})"


def _memory_plan(job, where: str, out, err) -> bool:  # type: ignore[no-untyped-def]
    """Print the job's GPU memory plan; False (with each problem on `err`, field first) when it does not fit."""
    from mmrl_api.memory_plan import spec_plan

    plan = spec_plan(job.spec)
    if plan is None:
        print(f"{where}: GPU memory plan: unknown (needs a reference model and a known instanceType)", file=out)
        return True
    for line in plan.lines(problems=False):
        print(f"{where}: {line}", file=out)
    for problem in plan.problems:
        print(f"{where}: {problem.field}: {problem.message}", file=err)
    return plan.fits


def validate_files(paths: Sequence[str], out=sys.stdout, err=sys.stderr) -> int:  # type: ignore[no-untyped-def]
    """Validate every MultimodalRLJob and ModelServer document in the files; print errors with field paths.
    Exit status."""
    import yaml  # here, like every command's imports: `mmrl operator` starts without them (issue #32)

    from mmrl_api import validate_manifest

    failed = False
    for path in paths:
        try:
            docs = list(yaml.safe_load_all(Path(path).read_text()))
        except (OSError, yaml.YAMLError) as exc:
            print(f"{path}: cannot read: {exc}", file=err)
            failed = True
            continue
        docs = [d for d in docs if d is not None]
        ours = [d for d in docs if not isinstance(d, dict) or d.get("kind", KIND) in (KIND, SERVER_KIND)]
        if not ours:
            print(f"{path}: no {KIND} or {SERVER_KIND} documents", file=err)
            failed = True
        for index, doc in enumerate(ours):
            where = path if len(ours) == 1 else f"{path}[{index}]"
            if isinstance(doc, dict) and doc.get("kind") == SERVER_KIND:
                failed = not _validate_server(doc, where, out, err) or failed
                continue
            job, errors = validate_manifest(doc)
            if job is None:
                failed = True
                for e in errors:
                    print(f"{where}: {e.path}: {e.message}", file=err)
            else:
                print(f"{where}: ok: {_summary(job)}", file=out)
                print(f"{where}: checkpoint footprint: {_footprint(job)}", file=out)
                if not _memory_plan(job, where, out, err):
                    failed = True
    return 1 if failed else 0


def _validate_server(doc: dict, where: str, out, err) -> bool:  # type: ignore[no-untyped-def,type-arg]
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmrl", description="mmrl: multimodal RL post-training on Kubernetes")
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="validate MultimodalRLJob and ModelServer YAML files offline")
    v.add_argument("files", nargs="+")
    r = sub.add_parser("render", help="print every object the operator would create for a job file, as YAML")
    r.add_argument("file")
    r.add_argument("-n", "--namespace", default=None, help="render into this namespace (default: the file's)")
    s = sub.add_parser("status", help="show a job's phase, conditions, attempts, progress and events")
    s.add_argument("name")
    s.add_argument("-n", "--namespace", default=None)
    s.add_argument(
        "--server", action="store_true", help="NAME is a ModelServer: its adapters, aliases (with history), refusals"
    )
    lg = sub.add_parser("logs", help="print a job's trainer log, every attempt's (from the job's volume)")
    lg.add_argument("name")
    lg.add_argument("--attempt", type=int, default=None, help="only this attempt, as the trainer wrote it")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    lg.add_argument("-n", "--namespace", default=None)
    pl = sub.add_parser("plot", help="draw a job's reward curve (training and held-out) from its tracking data")
    pl.add_argument("name")
    pl.add_argument("-o", "--output", default="reward.png", help="the PNG to write (default: reward.png)")
    pl.add_argument("--dir", default=None, help="read the TensorBoard files of this job directory (a mounted volume)")
    pl.add_argument("-n", "--namespace", default=None)
    pl.add_argument(
        "--timeout",
        type=budget_seconds,
        default=DEFAULT_BUDGET,
        help=f"seconds for the whole read of the job's MLflow run, retries included (default: {DEFAULT_BUDGET:g})",
    )
    ch = sub.add_parser("chat", help="ask a serving job's adapter one question (through its Service)")
    ch.add_argument("name", help="the job; with --server, the model: an adapter's served name or an alias")
    ch.add_argument("question")
    ch.add_argument("--image", help="an image file to send with the question")
    ch.add_argument("--server", default=None, help="ask this ModelServer for the model NAME")
    ch.add_argument("-n", "--namespace", default=None)
    rb = sub.add_parser("rollback", help="point a ModelServer alias back at the adapter it served before (a pin)")
    rb.add_argument("alias")
    rb.add_argument("--server", required=True, help="the ModelServer that holds the alias")
    rb.add_argument("--to", default=None, help="the job whose adapter to point at (default: the previous one)")
    rb.add_argument("--unpin", action="store_true", help="remove the pin: the alias follows promotions again")
    rb.add_argument("-n", "--namespace", default=None)
    o = sub.add_parser("operator", help="run the operator (kopf)")
    o.add_argument("--namespace", action="append", default=[], help="watch only these namespaces (repeatable)")
    o.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (default)")
    o.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL")
    o.add_argument("--metrics-port", type=int, default=9090)
    o.add_argument("--peering", default="mmrl-operator", help="peering object name (one active replica)")
    o.add_argument("--priority", type=int, default=0)
    o.add_argument("--standalone", action="store_true", help="no peering (single replica / development)")
    args = parser.parse_args(argv)

    if args.command == "validate":
        return validate_files(args.files)
    if args.command == "render":
        from mmrl_operator.cli.render import render_file

        return render_file(args.file, args.namespace)
    if args.command == "status" and args.server:
        from mmrl_operator.cli.server_status import show_server_status

        return show_server_status(args.name, args.namespace)
    if args.command == "status":
        from mmrl_operator.cli.status import show_status

        return show_status(args.name, args.namespace)
    if args.command == "logs":
        from mmrl_operator.cli.logs import show_logs

        return show_logs(args.name, args.namespace, args.attempt, args.follow)
    if args.command == "plot":
        from mmrl_operator.cli.plot import plot_job

        where = Path(args.dir) if args.dir else None
        return plot_job(args.name, args.namespace, Path(args.output), where, args.timeout)
    if args.command == "chat":
        from mmrl_operator.cli.chat import main as chat

        return chat(args.name, args.question, args.image, args.namespace, args.server)
    if args.command == "rollback":
        from mmrl_operator.cli.rollback import main as rollback

        return rollback(args.alias, args.server, args.namespace, args.to, args.unpin)
    # A start imports some 100,000 objects (the Kubernetes client, kopf, the API's models): no cyclic collection
    # runs among them; run.py freezes them out of later collections and turns collection on again (issue #32).
    gc.disable()
    from mmrl_operator.runtime.run import run_operator

    return run_operator(args)


if __name__ == "__main__":
    sys.exit(main())
