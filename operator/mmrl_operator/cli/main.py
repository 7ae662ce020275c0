"""`mmrl` command line: validate and render job files offline, inspect a job on the cluster, run the operator.

`mmrl validate` accepts exactly what the apiserver (with the chart's admission policies) and the operator together
accept (validate.py). It reads like kubectl: every command but `operator` takes `-n/--namespace`, `--kubeconfig` and
`--context` from one parent parser; files come with `-f FILE|DIR|-`; data comes out with `-o yaml|json`. Errors go
through one handler (errors.py): a user's mistake is one line on stderr and a non-zero exit status, never a
traceback. Commands import what they need (the Kubernetes client, YAML, the API's models) only when they run, so
`mmrl operator` starts without what it does not use (issue #32).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from mmrl_operator.cli.bounded_mlflow import DEFAULT_BUDGET, budget_seconds
from mmrl_operator.cli.errors import UserError, run_guarded
from mmrl_operator.cli.kubeconfig import ClusterOptions, offline_namespace
from mmrl_operator.cli.validate import validate_files

OUTPUT_FORMATS = ("yaml", "json")


def _cluster_options() -> argparse.ArgumentParser:
    """The options every command shares, as kubectl spells them."""
    shared = argparse.ArgumentParser(add_help=False)
    group = shared.add_argument_group("cluster options")
    group.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="the namespace (default: the kubeconfig context's, else `default`; validate and render put a job in "
        "its file's metadata.namespace unless -n is given)",
    )
    group.add_argument("--kubeconfig", default=None, help="the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    group.add_argument("--context", default=None, help="the kubeconfig context (default: its current-context)")
    return shared


def _files(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        default=[],
        metavar="FILE|DIR|-",
        help=f"{what}: a file, a directory (its *.yaml and *.yml files) or - for standard input (repeatable)",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="the same as -f FILE")


class _Version(argparse.Action):
    """`--version`, looked up only when asked: the metadata lookup would cost every other command's start."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the mmrl version")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from mmrl_operator.cli.version import mmrl_version

        print(f"mmrl {mmrl_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmrl", description="mmrl: multimodal RL post-training on Kubernetes")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    shared = [_cluster_options()]
    offline = " Offline: the kubeconfig is read only for its context's namespace; no cluster is contacted."

    v = sub.add_parser(
        "validate",
        parents=shared,
        help="validate MultimodalRLJob and ModelServer YAML files offline",
        description="Validate MultimodalRLJob and ModelServer files with the models the CRD is generated from."
        + offline,
    )
    _files(v, "the manifests to validate")
    v.add_argument(
        "--spec-patch-policy",
        choices=("on", "off"),
        default="on",
        help="judge specPatches as the chart's admission policy does (on: the chart's default; off: for a platform "
        "that turned specPatchPolicy.enabled off)",
    )
    r = sub.add_parser(
        "render",
        parents=shared,
        help="print every object the operator would create for a job file, as YAML",
        description="Print, as YAML, every object the operator would create for each job: into -n NAMESPACE, else "
        "the file's namespace, else the context's." + offline,
    )
    _files(r, "the jobs to render")

    s = sub.add_parser("status", parents=shared, help="show a job's phase, conditions, attempts, progress and events")
    s.add_argument("name")
    s.add_argument(
        "--server", action="store_true", help="NAME is a ModelServer: its adapters, aliases (with history), refusals"
    )
    s.add_argument(
        "-o", "--output", choices=OUTPUT_FORMATS, default=None, help="print the object as YAML or JSON instead"
    )
    lg = sub.add_parser(
        "logs", parents=shared, help="print a job's trainer log, every attempt's (from the job's volume)"
    )
    lg.add_argument("name")
    lg.add_argument("--attempt", type=int, default=None, help="only this attempt, as the trainer wrote it")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    pl = sub.add_parser(
        "plot", parents=shared, help="draw a job's reward curve (training and held-out) from its tracking data"
    )
    pl.add_argument("name")
    pl.add_argument("-o", "--output", default="reward.png", help="the PNG to write (default: reward.png)")
    pl.add_argument("--dir", default=None, help="read the TensorBoard files of this job directory (a mounted volume)")
    pl.add_argument(
        "--timeout",
        type=budget_seconds,
        default=DEFAULT_BUDGET,
        help=f"seconds for the whole read of the job's MLflow run, retries included (default: {DEFAULT_BUDGET:g})",
    )
    ch = sub.add_parser("chat", parents=shared, help="ask a serving job's adapter one question (through its Service)")
    ch.add_argument("name", help="the job; with --server, the model: an adapter's served name or an alias")
    ch.add_argument("question")
    ch.add_argument("--image", help="an image file to send with the question")
    ch.add_argument("--server", default=None, help="ask this ModelServer for the model NAME")
    rb = sub.add_parser(
        "rollback", parents=shared, help="point a ModelServer alias back at the adapter it served before (a pin)"
    )
    rb.add_argument("alias")
    rb.add_argument("--server", required=True, help="the ModelServer that holds the alias")
    rb.add_argument("--to", default=None, help="the job whose adapter to point at (default: the previous one)")
    rb.add_argument("--unpin", action="store_true", help="remove the pin: the alias follows promotions again")

    o = sub.add_parser("operator", help="run the operator (kopf)")
    o.add_argument("--namespace", action="append", default=[], help="watch only these namespaces (repeatable)")
    o.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (default)")
    o.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL")
    o.add_argument("--metrics-port", type=int, default=9090)
    o.add_argument("--peering", default="mmrl-operator", help="peering object name (one active replica)")
    o.add_argument("--priority", type=int, default=0)
    o.add_argument("--standalone", action="store_true", help="no peering (single replica / development)")
    o.add_argument(
        "--trainer-identity",
        default=os.environ.get("MMRL_TRAINER_IDENTITY_FILE"),
        metavar="FILE",
        help="the chart's trainerIdentity values (JSON or YAML): annotations for each namespace's mmrl-trainer "
        "ServiceAccount (default: $MMRL_TRAINER_IDENTITY_FILE; none: no annotations)",
    )
    return parser


def _sources(args: argparse.Namespace) -> list[str]:
    given = [*args.filename, *args.files]
    if not given:
        raise UserError(f"mmrl {args.command}: name the files with -f FILE|DIR|- (or as arguments)")
    return given


def _offline(args: argparse.Namespace) -> tuple[str | None, str]:
    """(-n, the namespace of a job whose file names none) for validate and render."""
    opts = ClusterOptions.of(args)
    return opts.namespace, offline_namespace(opts)


def _validate(args: argparse.Namespace) -> int:
    namespace, fallback = _offline(args)
    policy = args.spec_patch_policy == "on"
    return validate_files(_sources(args), namespace=namespace, fallback=fallback, spec_patch_policy=policy)


def _render(args: argparse.Namespace) -> int:
    from mmrl_operator.cli.render import render_sources
    from mmrl_operator.cli.sources import read_sources

    namespace, fallback = _offline(args)
    return render_sources(read_sources(_sources(args)), namespace, fallback, sys.stdout, sys.stderr)


def _status(args: argparse.Namespace) -> int:
    if args.server:
        from mmrl_operator.cli.server_status import show_server_status

        return show_server_status(args.name, ClusterOptions.of(args), args.output)
    from mmrl_operator.cli.status import show_status

    return show_status(args.name, ClusterOptions.of(args), args.output)


def _logs(args: argparse.Namespace) -> int:
    from mmrl_operator.cli.logs import show_logs

    return show_logs(args.name, ClusterOptions.of(args), args.attempt, args.follow)


def _plot(args: argparse.Namespace) -> int:
    from mmrl_operator.cli.plot import plot_job

    where = Path(args.dir) if args.dir else None
    return plot_job(args.name, ClusterOptions.of(args), Path(args.output), where, args.timeout)


def _chat(args: argparse.Namespace) -> int:
    from mmrl_operator.cli.chat import main as chat

    return chat(args.name, args.question, args.image, ClusterOptions.of(args), args.server)


def _rollback(args: argparse.Namespace) -> int:
    from mmrl_operator.cli.rollback import main as rollback

    return rollback(args.alias, args.server, ClusterOptions.of(args), args.to, args.unpin)


def _operator(args: argparse.Namespace) -> int:
    # A start imports some 100,000 objects (the Kubernetes client, kopf, the API's models): no cyclic collection
    # runs among them; run.py freezes them out of later collections and turns collection on again (issue #32).
    gc.disable()
    from mmrl_operator.runtime.run import run_operator

    return run_operator(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "validate": _validate,
    "render": _render,
    "status": _status,
    "logs": _logs,
    "plot": _plot,
    "chat": _chat,
    "rollback": _rollback,
    "operator": _operator,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(lambda: COMMANDS[args.command](args))


if __name__ == "__main__":
    sys.exit(main())
