"""Write docs/benchmarks.md from the JSON results in bench/out/ (one file per benchmark) and the hand-written
analysis in bench/notes.md. Run by `make bench` after the benchmarks; run it alone to re-render.

    python bench/report.py [--results bench/out] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import common

# The goals of issue #32 (the operator core), and the earlier apply and recovery goals.
TARGETS = {
    "apply_p99_s": 1.0,
    "apply_p99_ratio": 1.0,
    "recovery_p99_s": 2.0,
    "rss_mib": 150.0,
    "requests_per_pass": 0.0,
    "restart_first_pass_s": 1.0,
    "failover_sigkill_p99_s": 15.0 + 2.0,  # the lease duration + 2 s
    "failover_sigterm_p99_s": 2.0,
}


def load(results: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}


def verdict(value: float | None, target: float) -> str:
    if value is None:
        return "not measured"
    return "met" if value <= target else "**missed**"


def row(name: str, s: dict[str, Any]) -> str:
    if not s or not s.get("n"):
        return f"| {name} | - | - | - | - | - |"
    return f"| {name} | {s['n']} | {s['p50']:.2f} | {s['p90']:.2f} | {s['p99']:.2f} | {s['max']:.2f} |"


STAGES = {
    "fault_to_stop": "fault → attempt's RayJob deleted (operator)",
    "stop_to_next_rayjob": "RayJob deleted → next RayJob",
    "cluster_ready_again_to_next_rayjob": "cluster seen unready and ready again → next RayJob",
}
HEADER = "| measurement | n | p50 s | p90 s | p99 s | max s |\n|---|---|---|---|---|---|"


def mmrl_rows(ours: dict[str, Any]) -> list[str]:
    return [
        row("mmrl: apply → RayCluster", ours["apply_to_raycluster"]),
        row("mmrl: apply → first RayJob", ours["apply_to_first_rayjob"]),
        row("  of which RayCluster → ready (KubeRay, scheduler, kwok)", ours["raycluster_to_ready"]),
        row("  of which ready → first RayJob (operator)", ours["ready_to_first_rayjob"]),
    ]


def section_latency(r: dict[str, Any]) -> list[str]:
    ours, theirs = r["mmrl"], r.get("kuberay") or {}
    rounds = [x for x in r.get("rounds") or [] if x.get("ratio")]
    flags = r.get("kuberay_flags") or {}
    out = [
        f"## Latency: {ours['jobs']} jobs applied at once (real KubeRay)",
        "",
        f"{len(rounds)} rounds, each on a fresh control plane, the two controllers' phases in alternating order; both "
        f"at reconcile concurrency {r.get('operator_workers', 4)}, KubeRay's client at --qps {flags.get('qps', '?')} "
        f"--burst {flags.get('burst', '?')} (mmrl's has no limit).",
        "",
        "| round | order | mmrl apply → RayCluster p50 / p99 s | KubeRay RayJob → RayCluster p50 / p99 s "
        "| ratio p50 | ratio p99 |",
        "|---|---|---|---|---|---|",
    ]
    for x in rounds:
        a, b = x["mmrl"]["apply_to_raycluster"], x["kuberay"]["rayjob_to_raycluster"]
        out.append(
            f"| {x['round']} | {' then '.join(x['order'])} | {a['p50']} / {a['p99']} | {b['p50']} / {b['p99']} "
            f"| {x['ratio']['p50']}x | {x['ratio']['p99']}x |"
        )

    def spread(q: str) -> str:
        s = r.get(f"ratio_{q}_over_rounds") or {}
        return f"{s.get('median', '-')}x ({s.get('min', '-')}-{s.get('max', '-')})"

    out += [
        "",
        f"Ratio ours/KubeRay (apply → RayCluster), median over rounds (min-max): p50 {spread('p50')}, "
        f"p99 {spread('p99')}.",
        "",
        "The round with the median p99 ratio in full:",
        "",
        HEADER,
        *mmrl_rows(ours),
        row(f"KubeRay: RayJob → RayCluster ({theirs.get('rayjobs', 0)} RayJobs)", theirs.get("rayjob_to_raycluster")),
        "",
        f"Operator: {ours['reconciles']} reconciles, {ours['reconcile_seconds_mean']} s each on average; RSS "
        f"{ours['operator_rss_mib']} MiB. Whole run {r['seconds']} s.",
    ]
    return out


def section_workers(r: dict[str, Any]) -> list[str]:
    ours = r["mmrl"]
    return [
        f"## Latency with {r['operator_workers']} reconcile workers (MMRL_WORKERS; default 4), {ours['jobs']} jobs",
        "",
        HEADER,
        *mmrl_rows(ours),
        "",
        f"{ours['reconciles']} reconciles, {ours['reconcile_seconds_mean']} s each on average.",
    ]


def section_profile(r: dict[str, Any]) -> list[str]:
    prof = r["mmrl"].get("profile") or {}
    out = [
        f"## Profile of the operator during the {r['mmrl']['jobs']}-job run (py-spy, {prof.get('samples', 0)} samples)",
        "",
        "Latency under the sampler: " + f"apply → RayCluster {common.fmt(r['mmrl']['apply_to_raycluster'])}.",
        "",
        "Where the samples are: the innermost operator function on the stack (worker threads), else kopf's event",
        "processing (its asyncio thread and the thread pool it runs sync handlers in) or the Python runtime.",
        "",
        "| % of samples | where |",
        "|---|---|",
    ]
    out += [f"| {pct} | `{frame}` |" for frame, pct in prof.get("where_pct", [])[:15]]
    out += ["", "| inclusive % | function (file) |", "|---|---|"]
    out += [f"| {pct} | `{frame}` |" for frame, pct in prof.get("inclusive_pct", [])[6:25]]
    out += ["", "| self % | function (file) |", "|---|---|"]
    out += [f"| {pct} | `{frame}` |" for frame, pct in prof.get("self_pct", [])[:15]]
    return out


def section_recovery(r: dict[str, Any]) -> list[str]:
    return [
        f"## Recovery: {r['faults']} faults with {r['jobs']} jobs running (KubeRay stand-in)",
        "",
        HEADER,
        row("fault label → next attempt's RayJob", r["fault_to_next_rayjob"]),
        *(row(f"  {kind}", s) for kind, s in r["by_kind"].items()),
        *(row(f"  stage: {STAGES[k]}", s) for k, s in (r.get("stages") or {}).items()),
        "",
        f"Next attempt created while the job had no Running worker pod: "
        f"{len(r.get('next_attempt_before_worker_running', []))} of {r['faults']}. Whole run {r['seconds']} s.",
    ]


# The prober's request: it asks each Serving job's vLLM on threads of its own, never in a pass (runtime/prober.py).
PROBER_KIND = "get services/proxy"


def pass_requests(r: dict[str, Any]) -> float:
    """Requests per steady-state pass, the prober's /v1/models asks left out: the goal is about the passes."""
    passes = sum(v for k, v in r.get("api_requests_by_kind", {}).items() if k != PROBER_KIND)
    return round(passes / max(r["reconciles_in_window"], 1), 2)


def section_memory(r: dict[str, Any]) -> list[str]:
    kinds = ", ".join(f"{k}: {v}" for k, v in list(r["api_requests_by_kind"].items())[:10])
    return [
        f"## Memory and API calls: {r['jobs']} jobs ({r.get('running', r['jobs'])} training, "
        f"{r.get('serving', 0)} serving, the rest suspended), "
        f"{r['nodes']} nodes (KubeRay stand-in)",
        "",
        f"- operator RSS with {r['nodes']} nodes and no job: {r['rss_mib_with_nodes_only']} MiB",
        f"- operator RSS with {r['jobs']} jobs (steady state): {r['rss_mib_steady']} MiB; "
        f"peak (VmHWM) {r['rss_mib_peak']} MiB",
        f"- steady state {r['steady_after_seconds']} s after the jobs were created; phases at the end: "
        f"{r['phases_at_end']}",
        f"- steady state over {r['window_seconds']} s: {r['reconciles_in_window']} reconciles "
        f"({r['reconciles_per_second']}/s; the 30 s resync alone asks for "
        f"{r['reconciles_per_second_asked_by_resync']}/s), "
        f"{r['api_requests_in_window']} API requests (watches excluded) = **{r['api_requests_per_reconcile']} per "
        "reconcile**",
        f"- requests by kind: {kinds}",
        *(
            [
                "",
                HEADER,
                row("operator SIGKILL + start → metrics port", r["restart_to_metrics_port"]),
                row("operator SIGKILL + start → first pass of an existing job", r["restart_to_first_pass"]),
                row(f"operator SIGKILL + start → every one of the {r['jobs']} jobs passed", r["restart_to_every_job"]),
                "",
            ]
            if "restart_to_first_pass" in r
            else []
        ),
        f"- whole run {r['seconds']} s",
    ]


def section_failover(r: dict[str, Any]) -> list[str]:
    return [
        f"## Failover: {r['jobs']} jobs under 2 replicas, {r['rounds']} rounds (lease {r['lease_seconds']} s)",
        "",
        HEADER,
        row("leader SIGKILL → the other replica's first pass", r["sigkill_first_pass"]),
        row("leader SIGKILL → every job reconciled", r["sigkill_every_job"]),
        row("leader SIGTERM (clean stop) → the other's first pass", r["sigterm_first_pass"]),
        row("leader SIGTERM → every job reconciled", r["sigterm_every_job"]),
    ]


def section_chaos(r: dict[str, Any]) -> list[str]:
    return [
        f"## Chaos: {r['jobs']} job lifecycles, {r['operator_kills']} SIGKILLs, {r['node_faults']} node faults",
        "",
        f"- duplicates: **{r['duplicates']}** ({json.dumps(r['duplicate_detail'])})",
        f"- converged: **{r['converged']}/{r['jobs']}** Succeeded ({r['phases']}); {r['attempts_total']} attempts",
        "",
        HEADER,
        row("job created → Succeeded", r["time_to_converge"]),
        row("operator (re)start → serving (imports, kopf start)", r.get("operator_start_to_serving", {})),
        "",
        f"Last SIGKILL → all converged: {r['last_kill_to_all_converged_seconds']} s. Whole run {r['seconds']} s.",
    ]


def section_trainer(r: dict[str, Any]) -> list[str]:
    out = [
        f"## Trainer (CPU, {r['threads']} torch thread, {r['steps']} steps x {r.get('repeat', 1)} runs per side, "
        "tiny Qwen3-VL, LoRA r=8)",
        "",
        "| prompts x samples | mmrl local s/step p50 (p90) | plain TRL s/step p50 (p90) |",
        "|---|---|---|",
    ]
    for x in r["rows"]:
        m, t = x["mmrl_local"], x["plain_trl"]
        out.append(
            f"| {x['prompts']} x {x['samples']} | {m['p50']:.3f} ({m['p90']:.3f}) | {t['p50']:.3f} ({t['p90']:.3f}) |"
        )
    ck = r["checkpoint"]
    out += ["", f"Checkpoint ({ck['checkpoint_mib']} MiB): save {ck['save_s']} s, load {ck['load_s']} s."]
    return out


def section_podnet(r: dict[str, Any]) -> list[str]:
    def ms(s: dict[str, Any]) -> str:
        return f"| {s['n']} | {s['p50']:.2f} | {s['p90']:.2f} | {s['max']:.2f} |"

    return [
        f"## Local pod network ({r['pods']} pods, {r['requests']} requests per side)",
        "",
        "| measurement | n | p50 ms | p90 ms | max ms |",
        "|---|---|---|---|---|",
        f"| network namespace + veth + route for a pod {ms(r['sandbox_setup_ms'])}",
        f"| namespace removed (release) {ms(r['sandbox_release_ms'])}",
        f"| pod deleted → its namespace gone (reaper polls every {r['reaper_poll_s']} s) "
        f"{ms(r['pod_deleted_to_namespace_gone_ms'])}",
        f"| GET /version, kept-alive, from the host {ms(r['host_kept_alive_ms'])}",
        f"| GET /version, kept-alive, from a pod (relay) {ms(r['pod_kept_alive_ms'])}",
        f"| GET /version, new TLS connection, from the host {ms(r['host_new_connection_ms'])}",
        f"| GET /version, new TLS connection, from a pod (relay) {ms(r['pod_new_connection_ms'])}",
    ]


def section_demo(r: dict[str, Any]) -> list[str]:
    t, goal = r["timings_s"], r["targets"]
    rows = [f"| {name} | {seconds} |" for name, seconds in t.items()]
    return [
        "## The demo's phases (`make demo`: real KubeRay and Ray, warm caches)",
        "",
        "Seconds since the job was applied, except where a phase says what it is measured from.",
        "",
        "| phase | s |",
        "|---|---|",
        *rows,
        f"| whole `make demo` | {r['wall_s']} |",
        "",
        f"Goals: the whole demo ≤ {goal['wall_s']:.0f} s ({verdict(r['wall_s'], goal['wall_s'])}); fault → first "
        f"new step ≤ {goal['resume_ratio']}x the cold start's time to its first step: {r['resume_ratio']}x "
        f"({verdict(r['resume_ratio'], goal['resume_ratio'])}). Ray submissions: "
        + ", ".join(f"{k} = {v}" for k, v in r["submissions"].items())
        + ".",
    ]


def section_validation(r: dict[str, Any]) -> list[str]:
    return [
        f"## Validation agreement: `mmrl validate` vs the apiserver ({r['specs']} generated specs)",
        "",
        "| specs | accepted by mmrl validate | accepted by the apiserver (dry run) | disagreements "
        "| generate s | dry runs s |",
        "|---|---|---|---|---|---|",
        f"| {r['specs']} | {r['accepted_by_mmrl_validate']} | {r['accepted_by_apiserver']} | "
        f"{r['disagreements']} | {r['generate_s']} | {r['compare_s']} |",
    ]


def load_note(r: dict[str, Any]) -> str:
    m = r.get("machine") or {}
    load = m.get("load_1m", m.get("load_1m_at_start"))
    return f"1-minute load average on the 2 cores when this result was written: {load}"


COMPARED = (
    ("latency", "apply → RayCluster", ("mmrl", "apply_to_raycluster")),
    ("latency", "apply → first RayJob", ("mmrl", "apply_to_first_rayjob")),
    ("latency", "  ready → first RayJob (operator)", ("mmrl", "ready_to_first_rayjob")),
    ("recovery", "fault label → next RayJob", ("fault_to_next_rayjob",)),
)
SCALARS = (
    ("latency", "reconcile passes for the 200 jobs", ("mmrl", "reconciles")),
    ("latency", "mean pass (s)", ("mmrl", "reconcile_seconds_mean")),
    ("memory", "operator RSS, nodes only (MiB)", ("rss_mib_with_nodes_only",)),
    ("memory", "operator RSS, all jobs (MiB)", ("rss_mib_steady",)),
    ("memory", "API requests per steady-state pass", ("api_requests_per_reconcile",)),
    ("memory", "steady-state passes per second", ("reconciles_per_second",)),
)


def _dig(r: dict[str, Any] | None, path: tuple[str, ...]) -> Any:
    for key in path:
        r = (r or {}).get(key)
    return r


def revision(results: Path) -> str:
    """The checkout a run of benchmarks measured (`git describe` when it began, in REVISION), or "?"."""
    path = results / "REVISION"
    return path.read_text().strip() if path.exists() else "?"


def section_compare(results: Path) -> list[str]:
    """Before/after of an operator change (`make bench-compare BEFORE=<rev>`), if bench/out/before and after exist."""
    before_dir, after_dir = results / "before", results / "after"
    if not (before_dir.is_dir() and after_dir.is_dir()):
        return []
    before, after = load(before_dir), load(after_dir)
    out = [
        f"## Before/after: operator at {revision(before_dir)} vs {revision(after_dir)} (`make bench-compare`)",
        "",
        "Same harness, same machine, run interleaved (before, after) per benchmark.",
        "",
        "| measurement | before p50 s | after p50 s | before p99 s | after p99 s |",
        "|---|---|---|---|---|",
    ]
    for bench, label, path in COMPARED:
        b, a = _dig(before.get(bench), path), _dig(after.get(bench), path)
        if b and a:
            out.append(f"| {label} | {b['p50']:.2f} | {a['p50']:.2f} | {b['p99']:.2f} | {a['p99']:.2f} |")
    out += ["", "| figure | before | after |", "|---|---|---|"]
    for bench, label, path in SCALARS:
        b, a = _dig(before.get(bench), path), _dig(after.get(bench), path)
        if b is not None and a is not None:
            out.append(f"| {label} | {b} | {a} |")
    loads = ", ".join(
        f"{side} {name} {(r.get('machine') or {}).get('load_1m', '?')}"
        for side, res in (("before", before), ("after", after))
        for name, r in res.items()
    )
    return [*out, "", f"_1-minute load average when each result was written: {loads}._"]


def render(res: dict[str, dict[str, Any]], notes: str, compare: list[str] | None = None, rev: str = "?") -> str:
    any_result = next(iter(res.values()), {})
    m = any_result.get("machine") or common.machine()
    lat, rec, mem = res.get("latency"), res.get("recovery"), res.get("memory")
    p99 = lat["mmrl"]["apply_to_raycluster"]["p99"] if lat else None
    p99_rayjob = lat["mmrl"]["apply_to_first_rayjob"]["p99"] if lat else None
    ratio = lat.get("ratio_p99_ours_over_kuberay") if lat else None
    large = res.get("latency-1000")
    ratio_large = large.get("ratio_p99_ours_over_kuberay") if large else None
    rec_p99 = rec["fault_to_next_rayjob"]["p99"] if rec else None
    rss = max(mem["rss_mib_steady"], mem["rss_mib_peak"]) if mem else None
    per_pass = pass_requests(mem) if mem else None
    probes = (mem or {}).get("api_requests_by_kind", {}).get(PROBER_KIND, 0)
    restart = _dig(mem, ("restart_to_first_pass", "p99"))
    kill = _dig(res.get("failover"), ("sigkill_first_pass", "p99"))
    term = _dig(res.get("failover"), ("sigterm_first_pass", "p99"))
    n_early = len((rec or {}).get("next_attempt_before_worker_running", []))
    early = f" ({n_early} of {rec['faults']} next attempts started before the worker ran, see 9)" if n_early else ""
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (bench/report.py) from bench/out/*.json; the analysis at the end is bench/notes.md.",
        "",
        f"Measured at {rev} (`git describe` of the checkout when `make bench` began; the notes name the commit of each"
        " figure they quote).",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB memory, Python {m['python']}, "
        f"Linux {m['kernel']}. The machine is shared with other workers (the load average under each section), so "
        "figures are noisy. Control plane: etcd + kube-apiserver + "
        "controller-manager + scheduler + kwok from local/, KubeRay ray-operator v1.5.1 built from its Go module.",
        "",
        "## Targets",
        "",
        "| target | measured | verdict |",
        "|---|---|---|",
        f"| p99 apply → children ≤ {TARGETS['apply_p99_s']} s | RayCluster {p99} s, first RayJob {p99_rayjob} s "
        f"| {verdict(p99_rayjob or p99, TARGETS['apply_p99_s'])} |",
        f"| apply → RayCluster p99 ≤ {TARGETS['apply_p99_ratio']}x KubeRay's, 200 jobs (median of rounds) | {ratio}x "
        f"| {verdict(ratio, TARGETS['apply_p99_ratio'])} |",
        f"| the same, 1,000 jobs | {ratio_large}x | {verdict(ratio_large, TARGETS['apply_p99_ratio'])} |",
        f"| recovery p99 ≤ {TARGETS['recovery_p99_s']} s | {rec_p99} s{early} "
        f"| {verdict(rec_p99, TARGETS['recovery_p99_s'])} |",
        f"| RSS ≤ {TARGETS['rss_mib']} MiB | {rss} MiB | {verdict(rss, TARGETS['rss_mib'])} |",
        f"| API requests per steady-state pass ≤ {TARGETS['requests_per_pass']:.0f} | {per_pass} (beside them, "
        f"{probes} prober asks of vLLM's /v1/models) | {verdict(per_pass, TARGETS['requests_per_pass'])} |",
        f"| restart → first pass ≤ {TARGETS['restart_first_pass_s']} s (p99) | {restart} s "
        f"| {verdict(restart, TARGETS['restart_first_pass_s'])} |",
        f"| leader SIGKILL → standby's first pass p99 ≤ {TARGETS['failover_sigkill_p99_s']:.0f} s | {kill} s "
        f"| {verdict(kill, TARGETS['failover_sigkill_p99_s'])} |",
        f"| clean handover (SIGTERM) → first pass p99 ≤ {TARGETS['failover_sigterm_p99_s']:.0f} s | {term} s "
        f"| {verdict(term, TARGETS['failover_sigterm_p99_s'])} |",
        "",
    ]
    sections = (
        ("latency", section_latency),
        ("latency-1000", section_latency),
        ("latency-profile", section_profile),
        ("recovery", section_recovery),
        ("memory", section_memory),
        ("failover", section_failover),
        ("chaos", section_chaos),
        ("trainer", section_trainer),
        ("podnet", section_podnet),
        ("validation-agreement", section_validation),
        ("demo", section_demo),
    )
    lines += [*(compare or []), ""] if compare else []
    for name, render_section in sections:
        if name in res:
            lines += [*render_section(res[name]), "", f"_{load_note(res[name])}_", ""]
        if name == "latency-profile":
            for other in sorted(n for n in res if n.startswith("latency-workers")):
                lines += [*section_workers(res[other]), "", f"_{load_note(res[other])}_", ""]
    return "\n".join(lines) + "\n" + notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=common.RESULTS)
    parser.add_argument("--out", type=Path, default=common.ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    notes_path = Path(__file__).with_name("notes.md")
    notes = notes_path.read_text() if notes_path.exists() else ""
    args.out.write_text(render(load(args.results), notes, section_compare(args.results), revision(args.results)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
