"""`make demo SHARED=1`: after the main job, shared serving end to end on the same cluster. One ModelServer
(examples/local-model-server.yaml: real vLLM on CPU, run by the local kubelet from the server's own Deployment) and
two jobs trained for real, like the main one (KubeRay, Ray, Kueue; a different training sample each), that serve
into it under one alias, `colors-prod`:

1. the server and colors-v1 are applied together; once v1 passes its gate, the operator has the running server's
   gateway load a checked copy of the adapter's files, and points the alias at it;
2. a client starts asking the alias about a red image, and keeps asking to the end;
3. colors-v2 trains and passes its gate: the alias moves to v2, and v1 stays loaded;
4. `mmrl rollback colors-prod --server colors` pins the alias back on v1;
5. a stranger's pod in the namespace tries to unload v1 (and to load, and to move the alias in place) through the
   server's Service and at its replica's IP: every attempt is refused.

The summary prints what the server's status and vLLM's `/v1/models` say at the end (every adapter and the alias's
root), the alias's history with each adapter's held-out reward, the client's answers and errors, and how long each
promotion took to answer. Only the local settings differ from a cluster's: `Demo` trains each job as `make demo`
trains its own.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.stranger import Attempt, attempts, run_stranger
from mmrl_operator.cli.chat import ask_server
from mmrl_operator.cli.server_status import render_server_status
from mmrl_operator.cli.status import recent_events
from mmrl_operator.runtime.service_proxy import proxy_json
from mmrl_trainer.synthetic import colour_image

REPO = Path(__file__).resolve().parents[2]
SERVER_EXAMPLE = REPO / "examples" / "local-model-server.yaml"
ALIAS = "colors-prod"
QUESTION = "What colour is this?"
VERSIONS = (("colors-v1", 1), ("colors-v2", 2))  # (job, the seed of its training sample)
ASK_PAUSE = 0.25  # seconds between the client's questions: on 2 cores, leave most of the CPU to the training


def shared_job(name: str, server: str, seed: int) -> dict[str, Any]:
    """examples/local.yaml (as a merge patch on it) served from `server` under ALIAS, once it beats the untrained
    model on the held-out colours; trained on its own sample of the colour task. Labelled as the server's alias
    wants (examples/local-model-server.yaml: team=colors)."""
    return {
        "metadata": {"name": name, "labels": {"team": "colors"}},
        "spec": {
            "dataset": {"train": f"synthetic://colors?n=256&seed={seed}"},
            "inference": {
                "server": server,
                "servedModelName": name,
                "alias": ALIAS,
                "promoteWhen": {"beatsBaseline": True},
            },
        },
    }


class KeepAsking:
    """A client that asks one model on a ModelServer again and again (through the apiserver's service proxy, as
    `mmrl chat --server` does), keeping every answer and every error."""

    def __init__(
        self,
        api: client.ApiClient,
        ns: str,
        server: str,
        model: str,
        question: str = QUESTION,
        *,
        image: Path | None = None,
        pause: float = 0.0,
    ) -> None:
        """`pause`: seconds between one answer and the next question (a demo leaves the CPU to training)."""
        self.api, self.ns, self.server, self.model, self.question = api, ns, server, model, question
        self.image, self.pause = image, pause
        self.answers: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                answer = ask_server(self.api, self.ns, self.server, self.model, self.question, self.image)[0]
                self.answers.append(answer)
            except Exception as err:  # every failure counts: none may happen
                self.errors.append(f"{type(err).__name__}: {err}")
            self._stop.wait(self.pause)

    def __enter__(self) -> KeepAsking:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=180)


@dataclass
class SharedSummary:
    server: str
    phases: dict[str, str] = field(default_factory=dict)
    held_out: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)  # /v1/models at the end: id -> root
    server_status: str = ""  # `mmrl status NAME --server` at the end
    asked: int = 0
    answers: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    rollback: str = ""
    stranger: list[Attempt] = field(default_factory=list)  # what a pod that is not the operator was answered
    timings: dict[str, float] = field(default_factory=dict)
    error: str = ""

    @property
    def ok(self) -> bool:
        """Every step done, the client never saw an error, and the stranger changed nothing."""
        stranger_refused = bool(self.stranger) and all(a.refused for a in self.stranger)
        return not self.error and not self.errors and bool(self.rollback) and stranger_refused

    def render(self) -> str:
        lines = [f"shared serving: ModelServer {self.server}, alias {ALIAS}"]
        for job, phase in self.phases.items():
            first, last = self.held_out.get(job, (None, None))
            shown = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            lines.append(f"  job {job}: {phase}; held-out reward {shown(first)} -> {shown(last)}")
        lines.append(f"  $ mmrl status {self.server} --server")
        lines += [f"    {line}" for line in self.server_status.splitlines()]
        for model, root in self.models.items():
            lines.append(f"  /v1/models: {model} <- {root}")
        if self.rollback:
            lines.append(f"  $ mmrl rollback {ALIAS} --server {self.server}: {self.rollback}")
        counts = ", ".join(f"{n} x {a.strip()!r}" for a, n in self.answers.items())
        errors = len(self.errors)
        lines.append(f"  a client asking {ALIAS} the whole time: {self.asked} answers ({counts}), {errors} errors")
        lines += [f"    error: {e[:300]}" for e in self.errors[:3]]
        if self.stranger:
            refused = sum(a.refused for a in self.stranger)
            lines.append(f"  a stranger's pod in the namespace: {refused} of {len(self.stranger)} attempts refused")
            unload = next((a for a in self.stranger if a.what == "unload"), None)
            shown = [unload] if unload else []
            shown += [a for a in self.stranger if not a.refused]
            lines += [f"    {'refused' if a.refused else 'NOT REFUSED'}: {a.line()}" for a in shown]
        if self.timings:
            lines.append("  timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()))
        if self.error:
            lines.append(f"  stopped: {self.error}")
        return "\n".join(lines)


class SharedDemo:
    """Drives the steps of the module docstring on a cluster `make demo` set up. `make_demo(overrides, out_dir)`
    makes the `Demo` that trains one job (demo.Demo, with the caller's cluster settings)."""

    def __init__(
        self,
        api: client.ApiClient,
        kubectl: Path,
        kubeconfig: Path,
        make_demo: Callable[[dict[str, Any], Path], Any],
        *,
        namespace: str,
        out_dir: Path,
        say: Callable[[str], None],
    ) -> None:
        self.api, self.kubectl, self.kubeconfig, self.make_demo = api, kubectl, kubeconfig, make_demo
        self.ns, self.out_dir, self.say = namespace, out_dir, say
        self.custom = client.CustomObjectsApi(api)
        self.server_doc = yaml.safe_load(SERVER_EXAMPLE.read_text())
        self.server = self.server_doc["metadata"]["name"]
        self.summary = SharedSummary(server=self.server)

    def kubectl_apply(self, doc: dict[str, Any], name: str) -> None:
        manifest = self.out_dir / f"{name}.yaml"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
        cmd = [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), "apply", "-f", str(manifest)]
        self.say(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip())

    def status(self) -> dict[str, Any]:
        found = self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.SERVER_PLURAL, self.server)
        return found.get("status") or {}

    def alias_on(self) -> tuple[str, bool] | None:
        found = next((a for a in self.status().get("aliases") or [] if a["name"] == ALIAS), None)
        return (found["job"], bool(found.get("pinned"))) if found and found.get("loadedOn") else None

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            st = self.status()
            line = f"ModelServer {self.server}: {st.get('phase', 'Pending')} {st.get('message', '')}"
            if line != last:
                self.say(line)
                last = line
            time.sleep(0.5)
        raise TimeoutError(f"{what} within {timeout:.0f}s; server status: {self.status()}")

    def train(self, name: str, seed: int, timeout: float) -> float:
        """Train one version as `make demo` trains its job; returns when it has ended (monotonic time)."""
        demo = self.make_demo(shared_job(name, self.server, seed), self.out_dir / name)
        result = demo.run(fault=False, timeout=timeout)
        self.summary.phases[name] = result.phase
        self.summary.held_out[name] = (result.held_out_first, result.held_out_last)
        if result.phase not in ("Succeeded", "Serving"):
            raise RuntimeError(f"job {name} ended {result.phase}")
        return time.monotonic()

    def rollback(self) -> str:
        """`mmrl rollback colors-prod --server colors`: the CLI, as a user types it."""
        cmd = [sys.executable, "-m", "mmrl_operator.cli", "rollback", ALIAS, "--server", self.server]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"mmrl rollback exited {done.returncode}: {done.stderr.strip()[-500:]}")
        return done.stdout.strip()

    def stranger(self, job: str) -> list[Attempt]:
        """A pod of the namespace that is not the operator tries to unload `job`'s adapter (and more), on the node of
        the server's replica."""
        core = client.CoreV1Api(self.api)
        pods = core.list_namespaced_pod(self.ns, label_selector=f"{c.LABEL_SERVER}={self.server}").items
        replica = next(p for p in pods if p.status.pod_ip and not p.metadata.deletion_timestamp)
        adapter = next(a for a in self.status().get("adapters") or [] if a["job"] == job)
        host = f"{self.status()['service']}.{self.ns}.svc"
        tries = attempts(host, replica.status.pod_ip, adapter["name"], ALIAS, adapter["path"])
        return run_stranger(core, self.ns, "stranger", replica.spec.node_name, tries)

    def run(self, timeout: float = 900) -> SharedSummary:
        s, t0 = self.summary, time.monotonic()
        (v1, seed1), (v2, seed2) = VERSIONS
        asker: KeepAsking | None = None
        try:
            self.kubectl_apply(self.server_doc, f"modelserver-{self.server}")
            trained = self.train(v1, seed1, timeout)
            self.wait(lambda: self.alias_on() == (v1, False), timeout, f"{ALIAS} on {v1}")
            s.timings[f"{v1} trained -> {ALIAS} answers"] = time.monotonic() - trained
            image = self.out_dir / "question-red.png"
            colour_image("red", random.Random(0)).save(image)
            with KeepAsking(self.api, self.ns, self.server, ALIAS, image=image, pause=ASK_PAUSE) as asker:
                self.wait(lambda: asker.answers, 120, "the client's first answer")
                trained = self.train(v2, seed2, timeout)
                self.wait(lambda: self.alias_on() == (v2, False), 120, f"{ALIAS} moved to {v2}")
                s.timings[f"{v2} trained -> {ALIAS} moved"] = time.monotonic() - trained
                asked = time.monotonic()
                s.rollback = self.rollback()
                self.wait(lambda: self.alias_on() == (v1, True), 120, f"{ALIAS} pinned back on {v1}")
                s.timings["rollback -> alias back"] = time.monotonic() - asked
                at = len(asker.answers)
                self.wait(lambda: len(asker.answers) > at, 60, "an answer after the rollback")
                s.stranger = self.stranger(v1)
        except (TimeoutError, RuntimeError, subprocess.SubprocessError, client.exceptions.ApiException) as err:
            s.error = str(err)[:2000]
        if asker is not None:  # also when a step failed: what the client saw until then
            s.asked, s.answers, s.errors = len(asker.answers), dict(Counter(asker.answers)), asker.errors
        found = self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.SERVER_PLURAL, self.server)
        s.server_status = render_server_status(found, recent_events(self.api, self.ns, self.server, c.SERVER_KIND))
        status = found.get("status") or {}
        try:
            port = status["url"].rsplit(":", 1)[-1].split("/", 1)[0]
            listed = proxy_json(self.api, "GET", self.ns, status["service"], port, "/v1/models", deadline=10)
            s.models = {m["id"]: m.get("root", "") for m in listed["data"]}
        except Exception as err:  # the summary says what it could not read
            s.models = {"(not read)": f"{type(err).__name__}: {err}"}
        s.timings["shared part"] = time.monotonic() - t0
        return s
