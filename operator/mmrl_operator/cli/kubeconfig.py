"""Which kubeconfig, context and namespace a command uses, the way kubectl picks them, without a cluster.

Every command takes `--kubeconfig`, `--context` and `-n`. Commands that talk to a cluster connect with the context
chosen here; `validate` and `render` never connect, but still default to the same namespace, so `mmrl render job.yaml`
prints the objects into the namespace `kubectl apply -f job.yaml` would create them in. This module reads kubeconfig
files as plain YAML (no Kubernetes client import: `validate` stays fast), following kubectl's rules: `--kubeconfig`,
else every file in `$KUBECONFIG` (the first to set `current-context` wins, and the first to define a context name),
else `~/.kube/config`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmrl_operator.cli.errors import UserError

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
NAMESPACE_DEFAULT = "default"


class KubeconfigError(UserError):
    """The kubeconfig cannot be used: missing, unreadable, or without the context asked for."""


@dataclass(frozen=True)
class ClusterOptions:
    """The options every command shares (`-n`, `--kubeconfig`, `--context`), as given; None where not."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None

    @classmethod
    def of(cls, args: Any) -> ClusterOptions:
        return cls(getattr(args, "namespace", None), getattr(args, "kubeconfig", None), getattr(args, "context", None))


def kubeconfig_paths(explicit: str | None, env: dict[str, str] | None = None) -> list[Path]:
    """The kubeconfig files kubectl would read, in order; `explicit` (`--kubeconfig`) alone when given."""
    env = os.environ if env is None else env
    if explicit:
        return [Path(explicit).expanduser()]
    listed = [Path(p).expanduser() for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path(env.get("HOME") or Path.home()) / ".kube" / "config"]


@dataclass(frozen=True)
class Kubeconfig:
    files: list[Path]
    """The files that exist, in the order read."""
    current_context: str | None
    contexts: dict[str, dict[str, Any]]
    """Each context's `context:` mapping (cluster, user, namespace), by name."""

    def context(self, name: str | None) -> tuple[str | None, dict[str, Any]]:
        """(context name, its settings): `name` (`--context`) or the current context; KubeconfigError for a name
        that is not defined."""
        chosen = name or self.current_context
        if name and name not in self.contexts:
            known = ", ".join(sorted(self.contexts)) or "none"
            raise KubeconfigError(f"context {name!r} is not in {self.where()} (contexts: {known})")
        return chosen, self.contexts.get(chosen or "", {})

    def where(self) -> str:
        return os.pathsep.join(str(p) for p in self.files)


def read_kubeconfig(explicit: str | None, env: dict[str, str] | None = None) -> Kubeconfig:
    """The merged kubeconfig. KubeconfigError when `--kubeconfig` names a missing file, when no file exists, or when
    one is not a kubeconfig (not YAML, not a mapping)."""
    import yaml

    paths = kubeconfig_paths(explicit, env)
    if explicit and not paths[0].is_file():
        raise KubeconfigError(f"--kubeconfig {explicit}: no such file")
    found = [p for p in paths if p.is_file()]
    if not found:
        listed = (os.environ if env is None else env).get("KUBECONFIG")
        where = f"KUBECONFIG={listed}" if listed else str(paths[0])
        raise KubeconfigError(
            f"no kubeconfig: {where} does not exist; pass --kubeconfig FILE or set KUBECONFIG "
            "(for EKS: aws eks update-kubeconfig --name CLUSTER)"
        )
    current: str | None = None
    contexts: dict[str, dict[str, Any]] = {}
    for path in found:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise KubeconfigError(f"{path}: cannot read the kubeconfig: {one_line(exc)}") from None
        if not isinstance(doc, dict):
            raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping with clusters, contexts, users)")
        current = current or doc.get("current-context") or None
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                contexts.setdefault(entry["name"], entry.get("context") or {})
    return Kubeconfig(found, current, contexts)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def in_cluster() -> bool:
    """Running in a pod with a service account token, where kubectl needs no kubeconfig."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_NAMESPACE.is_file()


def offline_namespace(opts: ClusterOptions, env: dict[str, str] | None = None) -> str:
    """The namespace for an object whose file names none, without a cluster: `-n`, else the (chosen) context's
    namespace when a kubeconfig is readable, else the pod's own namespace in a pod, else `default`."""
    if opts.namespace:
        return opts.namespace
    try:
        _, context = read_kubeconfig(opts.kubeconfig, env).context(opts.context)
    except KubeconfigError:
        if opts.kubeconfig or opts.context:
            raise  # asked for by name: saying nothing would render into a namespace nobody chose
        context = {}
    if context.get("namespace"):
        return str(context["namespace"])
    if in_cluster() and not (opts.kubeconfig or opts.context):
        return IN_CLUSTER_NAMESPACE.read_text().strip() or NAMESPACE_DEFAULT
    return NAMESPACE_DEFAULT
