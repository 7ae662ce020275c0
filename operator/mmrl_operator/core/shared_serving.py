"""Jobs served from a ModelServer: which adapters a server holds, which jobs it refuses and why, what each replica
must load or unload, and what a job's status says about it. Pure: the server's pass (`runtime.servers`) and the
job's pass (`core.serving`) both decide from these, so the two never disagree.

A job's adapter goes into a server only when every one of these holds, checked on the server's side from the job's
spec and status (never taken on trust from the job's phase):
- the job names the server (same namespace: a name is all it can give), training succeeded, the promotion gate
  passed and the adapter passes vLLM's rules, as for a dedicated server;
- the trainer reported the digest of the adapter's files (every file, config included): each replica's gateway
  copies the files, loads the copy only if it has that digest and passes the same rules, and vLLM reads nothing else;
- the adapter is where the operator told the trainer to export it (`<jobDir>/adapter`, from the job's own spec and
  UID), on a claim the server mounts at the job's mount path and sub-path: a stranger's adapter has another path;
- the server can serve it as it was trained: the same base model and revision, a rank within `maxLoraRank`, a
  context at least as long as the longest conversation it was trained on, and a pixel cap no larger than training's;
- its served name is not taken by another job's adapter or the base model, and there is room (`maxAdapters`);
- the alias it claims, if any, is one the server declares (`spec.aliases`), its job's labels match the alias's
  jobSelector, and its evaluation passes the alias's own gate (the server owner's, on top of the job's).

The held set is the server's status (`status.adapters`): an adapter stays until its job is gone (a fresh read says
so) or no longer qualifies, so a restarted operator whose job store is still empty unloads nothing. New adapters
fill free room oldest job first; the rest wait as ServerFull. Nothing is ever unloaded to make room: an adapter in
use would vanish under its clients.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mmrl_api import MultimodalRLJob, adapter_rules
from mmrl_api.context_budget import spec_max_model_len
from mmrl_api.model_server import (
    ALIAS_HISTORY,
    AliasMove,
    AliasStatus,
    ModelServer,
    RefusedAdapter,
    ServedAdapter,
)
from mmrl_api.status import JobStatus
from mmrl_operator.core.builders import model_server as server_build
from mmrl_operator.core.builders.inference import adapter_name, model_path, served_base_name, training_processor_kwargs
from mmrl_operator.core.names import job_dir, job_uid
from mmrl_operator.core.promotion import gate_verdict, judge
from mmrl_operator.core.server_replicas import Wanted

TRAINED_PHASES = ("Succeeded", "Serving")


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


@dataclass(frozen=True)
class Candidate:
    """A job's adapter as a server would hold it."""

    name: str
    job: str
    job_uid: str
    path: str
    sha256: str
    rank: int
    held_out_reward: float | None
    created: str  # the job's creationTimestamp: older jobs get free room first
    alias: str = ""  # the alias the job claims
    digest: str = ""  # of every file of the adapter (status.adapter.digest)
    base_model: str = ""  # the model as the job's pods name it: the adapter's config must name it
    promoted: str | None = None  # when the job's Promoted condition turned True

    def served(self, since: str) -> ServedAdapter:
        return ServedAdapter(
            name=self.name,
            job=self.job,
            job_uid=self.job_uid,
            alias=self.alias,
            path=self.path,
            sha256=self.sha256,
            digest=self.digest,
            rank=self.rank,
            held_out_reward=self.held_out_reward,
            promoted=self.promoted,
            since=since,
        )


def names_server(job: MultimodalRLJob, server: ModelServer) -> bool:
    inf = job.spec.inference
    return inf.enabled and inf.server == server.name and job.namespace == server.namespace


def candidate(job: MultimodalRLJob, status: JobStatus, server: ModelServer) -> Candidate | Refusal | None:
    """What the server does with this job: hold its adapter (Candidate), refuse it (Refusal), or nothing yet
    (None: it does not name the server, or has no promoted, valid adapter yet)."""
    if not names_server(job, server) or status.phase not in TRAINED_PHASES or status.adapter is None:
        return None
    verdict = gate_verdict(job, status)
    if verdict is not None and not verdict[0]:
        return None
    reported = status.adapter
    cfg = dict(reported.config) or {"r": reported.rank, "lora_alpha": reported.alpha}
    cfg.setdefault("target_modules", reported.target_modules)
    cfg.setdefault("base_model_name_or_path", reported.base_model or None)
    if adapter_rules.config_violations(cfg):
        return None  # the job's own pass fails it (InvalidAdapter)
    refusal = fit(job, server, reported.rank, reported.path) or alias_claim(job, status, server)
    if refusal is not None:
        return refusal
    if not reported.digest:
        return Refusal(
            "AdapterDigestMissing",
            "the trainer reported no digest of the adapter's files (status.adapter.digest), which the server's "
            "gateway checks its copy against; run a trainer image of this operator's version",
        )
    evaluation = reported.evaluation
    return Candidate(
        name=adapter_name(job),
        job=job.name,
        job_uid=job_uid(job),
        path=reported.path,
        sha256=reported.sha256,
        rank=reported.rank,
        held_out_reward=evaluation.held_out_reward if evaluation else None,
        created=str((job.metadata.model_extra or {}).get("creationTimestamp") or ""),
        alias=job.spec.inference.alias or "",
        digest=reported.digest,
        base_model=model_path(job),
        promoted=next(
            (c.last_transition_time for c in status.conditions if c.type == "Promoted" and c.status == "True"), None
        ),
    )


def fit(job: MultimodalRLJob, server: ModelServer, rank: int, path: str) -> Refusal | None:
    """Why the server cannot serve this job's adapter as it was trained, or None when it can."""
    spec, model = server.spec, job.spec.model
    if (model.name, model.revision) != (spec.model.name, spec.model.revision):
        return Refusal(
            "BaseModelMismatch",
            f"the adapter was trained on {_model(model.name, model.revision)}; "
            f"server {server.name} serves {_model(spec.model.name, spec.model.revision)}",
        )
    if rank > spec.max_lora_rank:
        return Refusal(
            "RankTooLarge", f"adapter rank {rank} is above server {server.name}'s maxLoraRank {spec.max_lora_rank}"
        )
    trained = spec_max_model_len(job.spec.algorithm, job.spec.dataset.environment)
    if trained > spec.max_model_len:
        return Refusal(
            "ContextTooShort",
            f"the adapter was trained on conversations of up to {trained} tokens; server {server.name}'s "
            f"maxModelLen is {spec.max_model_len}, so it would refuse them",
        )
    cap = training_processor_kwargs(job)
    trained_pixels = cap["size"]["longest_edge"] if cap else None
    if trained_pixels is not None and (spec.max_image_pixels is None or spec.max_image_pixels > trained_pixels):
        served = "the model's own image size" if spec.max_image_pixels is None else f"{spec.max_image_pixels} pixels"
        return Refusal(
            "PixelCapTooLarge",
            f"the adapter was trained on images of at most {trained_pixels} pixels; server {server.name} resizes "
            f"to {served} (set its maxImagePixels to at most {trained_pixels})",
        )
    pvc = job.spec.checkpoint.pvc
    where = (pvc.claim_name, pvc.mount_path, pvc.sub_path) if pvc is not None else None
    volume = next((v for v in spec.adapter_volumes if (v.claim_name, v.mount_path, v.sub_path) == where), None)
    if volume is None:
        place = f"claim {pvc.claim_name} at {pvc.mount_path} (subPath {pvc.sub_path})" if pvc else "S3"
        return Refusal(
            "AdapterNotOnAVolume",
            f"the adapter is on {place}, which server {server.name} does not mount in its adapterVolumes",
        )
    expected = f"{job_dir(job)}/adapter"
    if path != expected or not path.startswith(server_build.adapter_root(server, volume) + "/"):
        return Refusal("AdapterPath", f"the adapter must be at {expected}, where the job exports it; it reports {path}")
    return None


def alias_claim(job: MultimodalRLJob, status: JobStatus, server: ModelServer) -> Refusal | None:
    """Why the server refuses the alias the job claims (spec.inference.alias), or None (no claim, or a claim the
    server's owner allows): the server must declare the alias, the job's labels must match its jobSelector, and the
    adapter must pass its promoteWhen."""
    name = job.spec.inference.alias
    if not name:
        return None
    declared = next((a for a in server.spec.aliases if a.name == name), None)
    if declared is None:
        offered = ", ".join(a.name for a in server.spec.aliases) or "none"
        return Refusal(
            "AliasNotDeclared",
            f"server {server.name} does not declare alias {name} (its spec.aliases: {offered}); its owner declares "
            "each alias and which jobs may claim it",
        )
    labels = (job.metadata.model_extra or {}).get("labels") or {}
    if not declared.job_selector.matches(labels):
        return Refusal(
            "AliasNotAllowed",
            f"server {server.name} lets only jobs labelled {declared.job_selector} claim alias {name}; this job's "
            f"labels do not match",
        )
    if declared.promote_when is not None:
        passed, why = judge(declared.promote_when, status, f"server {server.name}'s promoteWhen for alias {name}")
        if not passed:
            return Refusal("AliasGateNotMet", why)
    return None


def _model(name: str, revision: str | None) -> str:
    return f"{name}@{revision}" if revision else name


def held_set(
    server: ModelServer,
    held: list[ServedAdapter],
    verdicts: dict[str, Candidate | Refusal | None],
    now: str,
    refused_before: list[RefusedAdapter] | None = None,
) -> tuple[list[ServedAdapter], list[RefusedAdapter]]:
    """The adapters the server holds after this pass, and the jobs it refuses. `verdicts` has one entry per job
    that names the server or is held (by job name): `candidate` of it, or None for a held job that is gone.
    `refused_before`: the last pass's refusals; a job's quarantined files stay refused (`quarantine`).

    Every name vLLM holds takes one of maxAdapters: each adapter's, and each alias's (an alias is the adapter it
    points at, loaded once more under the alias). A name is never shared between adapters, aliases and the base
    model."""
    base = served_base_name(server.spec.model.name)
    keep: list[ServedAdapter] = []
    for entry in held:
        verdict = verdicts.get(entry.job)
        if isinstance(verdict, Candidate) and (verdict.job_uid, verdict.name, verdict.path, verdict.digest) == (
            entry.job_uid,
            entry.name,
            entry.path,
            entry.digest,
        ):
            keep.append(entry.model_copy(update={"alias": verdict.alias, "promoted": verdict.promoted}))
    refused: list[RefusedAdapter] = []
    names = {e.name: e.job for e in keep}
    aliases = {e.alias for e in keep if e.alias} | {p.alias for p in server.spec.alias_pins}
    fresh = sorted(
        (v for v in verdicts.values() if isinstance(v, Candidate) and v.job not in {e.job for e in keep}),
        key=lambda v: (v.created, v.job),
    )
    quarantined = {(r.job, r.digest): r for r in refused_before or [] if r.reason == QUARANTINED and r.digest}
    for v in fresh:
        if (v.job, v.digest) in quarantined:
            refused.append(quarantined[(v.job, v.digest)])
            continue
        taken = _taken(v, base, names, aliases)
        slots = 1 + (1 if v.alias and v.alias not in aliases else 0)
        if taken is not None:
            refused.append(RefusedAdapter(job=v.job, name=v.name, reason="NameTaken", message=taken))
        elif len(names) + len(aliases) + slots > server.spec.max_adapters:
            refused.append(
                RefusedAdapter(
                    job=v.job,
                    name=v.name,
                    reason="ServerFull",
                    message=f"server {server.name} holds its maxAdapters ({server.spec.max_adapters}, aliases "
                    "included); the adapter is loaded once one of them is unloaded (its job deleted) or maxAdapters "
                    "is raised",
                )
            )
        else:
            keep.append(v.served(now))
            names[v.name] = v.job
            if v.alias:
                aliases.add(v.alias)
    for job, verdict in sorted(verdicts.items()):
        if isinstance(verdict, Refusal):
            refused.append(RefusedAdapter(job=job, reason=verdict.reason, message=verdict.message))
    return keep, refused


QUARANTINED = "Quarantined"
QUARANTINE_AFTER = 5  # passes in a row (5 s apart while loading) in which an adapter loaded nowhere and a load failed


def quarantine(entries: list[ServedAdapter]) -> tuple[list[ServedAdapter], list[RefusedAdapter]]:
    """After a pass (each entry's `loaded_on` and `error` set by it): count the passes in a row in which an adapter
    loaded on no replica and a load failed, and refuse its files once that reaches QUARANTINE_AFTER, so a bad adapter
    is not loaded again on every pass for ever. Its job's next export (other files) is tried again."""
    kept: list[ServedAdapter] = []
    stuck: list[RefusedAdapter] = []
    for e in entries:
        failed = e.failed_passes + 1 if e.error and not e.loaded_on else 0
        if failed < QUARANTINE_AFTER:
            kept.append(e.model_copy(update={"failed_passes": failed}))
            continue
        message = (
            f"adapter {e.name} failed to load on every replica {failed} passes in a row (last: {e.error}); the server "
            "does not try these files again: export a new adapter, or delete the job"
        )
        stuck.append(RefusedAdapter(job=e.job, name=e.name, reason=QUARANTINED, message=message, digest=e.digest))
    return kept, stuck


def _taken(v: Candidate, base: str, names: dict[str, str], aliases: set[str]) -> str | None:
    """Why the candidate's served name or alias cannot be had, or None."""
    fix = "set spec.inference.servedModelName to another name"
    if v.name == base:
        return f"{v.name} is the base model's name on the server; {fix}"
    if v.name in names and names[v.name] != v.job:
        return f"the server already serves job {names[v.name]}'s adapter as {v.name}; {fix}"
    if v.name in aliases:
        return f"{v.name} is an alias on the server; {fix}"
    if v.alias and (v.alias == base or v.alias in names or v.alias == v.name):
        return f"alias {v.alias} is the name of an adapter or of the base model on the server; choose another alias"
    return None


def latest_promotion(entry: ServedAdapter) -> tuple[str, str, tuple[tuple[int, int | str], ...]]:
    """The order an alias's claims are taken in, the latest last: by its job's promotion (when the server took the
    files, for a job without the condition), then by the job's name in natural order (geo-v10 after geo-v9)."""
    parts = re.findall(r"\d+|\D+", entry.job)
    natural = tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)
    return (entry.promoted or entry.since or "", entry.since or "", natural)


def alias_targets(
    server: ModelServer, held: list[ServedAdapter], previous: list[AliasStatus], now: str
) -> list[AliasStatus]:
    """Where each alias points after this pass. A pin (spec.aliasPins: a rollback) holds it on its job's adapter;
    otherwise it follows the latest promotion: of the held adapters whose jobs claim it and that some replica
    loaded (at the last pass), the one whose job was promoted last (`latest_promotion`). So an alias moves only to
    files that loaded: one a replica's gateway refuses (its digest or vLLM's rules) never takes it. An alias nobody
    claims any more keeps pointing where it did while that adapter is held. Each move closes the previous entry of
    its history and opens one."""
    pins = {p.alias: p.job for p in server.spec.alias_pins}
    by_job = {e.job: e for e in held}
    claims: dict[str, list[ServedAdapter]] = {}
    for e in held:
        if e.alias:
            claims.setdefault(e.alias, []).append(e)
    before = {a.name: a for a in previous}
    out: list[AliasStatus] = []
    for name in sorted(set(claims) | set(before) | set(pins)):
        current = before[name].job if name in before else None
        eligible = [e for e in claims.get(name, []) if e.loaded_on or e.job == current]
        pinned = pins.get(name) in by_job
        if pinned:
            target = by_job[pins[name]]
        elif eligible:
            target = max(eligible, key=latest_promotion)
        elif current is not None and current in by_job:
            target = by_job[current]
        else:
            continue  # nothing loaded to point at: no alias (yet), or it goes
        unheld_pin = name in pins and not pinned
        history = list(before[name].history) if name in before else []
        if not history or history[-1].job != target.job:
            if history and history[-1].until is None:
                history[-1] = history[-1].model_copy(update={"until": now})
            history.append(
                AliasMove(job=target.job, adapter=target.name, since=now, held_out_reward=target.held_out_reward)
            )
        out.append(
            AliasStatus(
                name=name,
                job=target.job,
                adapter=target.name,
                path=target.path,
                digest=target.digest,
                pinned=pinned,
                history=history[-ALIAS_HISTORY:],
                error=(
                    f"pinned to job {pins[name]}, which the server does not hold (deleted, or refused): the alias "
                    "follows promotions until the pin is removed (mmrl rollback --unpin) or the job is held again"
                    if unheld_pin
                    else ""
                ),
            )
        )
    return out


def settle_aliases(
    aliases: list[AliasStatus], previous: list[AliasStatus], served: dict[str, dict[str, str]], errors: dict[str, str]
) -> list[AliasStatus]:
    """Each alias as the replicas serve it after this pass. `served`: replica -> {name: the digest it answers that name
    with}; `errors`: name -> why its load failed. An alias is loaded on the replicas that hold it at its target's
    digest. One that was to move and holds its new target on no replica, while some replica still answers it with
    the files it pointed at before, did not move: its status stays the previous one (target, history), with why, so
    the status always names the adapter clients get. The next pass tries the move again."""
    before = {a.name: a for a in previous}
    out = []
    for alias in aliases:
        on = sorted(replica for replica, names in served.items() if names.get(alias.name) == alias.digest)
        old = before.get(alias.name)
        if on or old is None or old.digest == alias.digest:
            out.append(alias.model_copy(update={"loaded_on": on}))
            continue
        still = sorted(replica for replica, names in served.items() if names.get(alias.name) == old.digest)
        if not still:  # answered from its old files nowhere either: it is (being) loaded afresh
            out.append(alias.model_copy(update={"loaded_on": []}))
            continue
        why = errors.get(alias.name) or "not loaded"
        message = f"moving to job {alias.job}'s adapter {alias.adapter} failed on every replica: {why}"
        out.append(old.model_copy(update={"loaded_on": still, "error": message}))
    return out


def desired_names(
    held: list[ServedAdapter], aliases: list[AliasStatus], base_models: dict[str, str] | None = None
) -> dict[str, Wanted]:
    """Every LoRA name a replica must hold: each adapter, and each alias at its target's files. `base_models`: the
    model each job (by name) trained on, as its pods name it."""
    models = base_models or {}
    want = {e.name: Wanted(e.path, e.digest, models.get(e.job, "")) for e in held}
    for a in aliases:
        want[a.name] = Wanted(a.path, a.digest, models.get(a.job, ""))
    return want


def job_view(job: MultimodalRLJob, server: dict[str, Any] | None) -> tuple[bool, str, str]:
    """The job's InferenceReady (status, reason, message) from its server's status, as the job's pass reads it."""
    name, server_name = adapter_name(job), job.spec.inference.server or ""
    if server is None:
        return False, "ServerNotFound", f"no ModelServer {server_name} in namespace {job.namespace}"
    st = server.get("status") or {}
    for r in st.get("refused") or []:
        if r.get("job") == job.name:
            return False, str(r.get("reason") or "Refused"), str(r.get("message") or "")
    entry = next((a for a in st.get("adapters") or [] if a.get("job") == job.name), None)
    if entry is None or entry.get("jobUid") != job_uid(job):
        return False, "AdapterLoading", f"waiting for server {server_name} to take adapter {name}"
    ready, loaded = int(st.get("readyReplicas") or 0), len(entry.get("loadedOn") or [])
    if entry.get("error"):
        return False, "AdapterLoadFailed", f"server {server_name} could not load adapter {name}: {entry['error']}"
    if ready == 0 or loaded < ready:
        return (
            False,
            "AdapterLoading",
            f"adapter {name} is loaded on {loaded} of {ready} ready replicas of {server_name}",
        )
    return True, "AdapterServed", f"adapter {name} answers at {st.get('url')} on server {server_name}"


PROGRESSING = ("AdapterLoading", "AdapterServed")  # the job's InferenceReady reasons that need no one's action


def server_refusal(server: str | None, ready: tuple[bool | None, str, str] | None) -> tuple[str, str] | None:
    """(reason, message) when the job's ModelServer refuses (or lacks) its adapter: the job is Stalled, since it
    cannot be served until someone changes the job or the server (kstatus; Argo CD shows it Degraded)."""
    if not server or ready is None or ready[0] is True or ready[1] in PROGRESSING:
        return None
    return ready[1], ready[2]
