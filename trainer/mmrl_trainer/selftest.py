"""`python -m mmrl_trainer selftest`: prove an image can train before it is pushed to HyperPod.

It builds the tiny Qwen3-VL offline (`tiny.py`) and trains it for a few GRPO steps on whatever hardware is there,
through the same code a job runs: SkyRL (`backends.skyrl.run`, after SkyRL's own `validate_cfg` on our settings)
when torch sees a CUDA GPU and SkyRL is importable, the local TRL backend otherwise. The first run stops at a
checkpoint, a second run resumes from it and finishes, and the exported adapter must pass the same vLLM check the
inference pod applies (`adapter.check_adapter_dir`). Every check is one row of the table it prints (or of the JSON
with `--json`); a check whose prerequisite failed is SKIP. Exit 0 only when every row is PASS, 1 (EXIT_FAILED) when
one is not, 2 (EXIT_BAD_CONFIG) for a bad command line; the last line of a failure is the contract's error line.
The operator runs it as a job's preflight (`spec.preflight`) on the job's own RayCluster.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mmrl_api.contract import EXIT_BAD_CONFIG, EXIT_FAILED, EXIT_OK, MODULE, SELFTEST, error_line

log = logging.getLogger("mmrl_trainer.selftest")
Backend = Literal["local", "skyrl"]
DATASET = "synthetic://colors?n=16&seed=1"
JOB_DIR = "selftest-job"  # under --workdir; only this folder is ever deleted there


@dataclass
class Check:
    name: str
    status: Literal["PASS", "FAIL", "SKIP"]
    detail: str
    seconds: float


@dataclass
class Report:
    backend: str
    workdir: str
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.status == "PASS" for c in self.checks)

    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if c.status == "FAIL"), None)

    def to_json(self) -> str:
        return json.dumps({"passed": self.passed, **asdict(self)}, indent=2)


class _Checks:
    """Runs checks in order; once one fails, the rest are recorded as SKIP (they depend on it)."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def run(self, name: str, fn: Callable[[], str]) -> None:
        failed = self.report.first_failure()
        if failed is not None:
            self.report.checks.append(Check(name, "SKIP", f"needs {failed.name}", 0.0))
            return
        start = time.monotonic()
        try:
            detail, status = fn(), "PASS"
        except Exception as err:  # a self-test reports every failure as a row, whatever raised it
            log.debug("check %s failed", name, exc_info=True)
            detail, status = f"{type(err).__name__}: {err}", "FAIL"
        self.report.checks.append(Check(name, status, " ".join(detail.split()), time.monotonic() - start))  # type: ignore[arg-type]


def skyrl_available() -> bool:
    return importlib.util.find_spec("skyrl") is not None


def choose_backend(requested: str) -> Backend:
    """auto: SkyRL where it can run (a CUDA GPU and SkyRL installed), else the local backend."""
    if requested in ("local", "skyrl"):
        return requested  # type: ignore[return-value]
    try:
        import torch
    except ImportError:
        return "local"  # the hardware row reports the broken torch
    return "skyrl" if torch.cuda.is_available() and skyrl_available() else "local"


def ray_cluster_gpus() -> float:
    """GPUs of the Ray cluster this process was submitted to (a RayJob's driver, on the GPU-less head: Ray always
    sets RAY_ADDRESS for it, ray/dashboard/modules/job/job_supervisor.py: JobSupervisor._get_driver_env_vars); 0
    outside one, where `skyrl.run` starts a local Ray that sees this machine's GPUs."""
    if not os.environ.get("RAY_ADDRESS"):
        return 0.0
    import ray

    ray.init(log_to_driver=False)
    try:
        return float(ray.cluster_resources().get("GPU", 0))
    finally:
        ray.shutdown()  # skyrl.run initialises Ray itself (utils.initialize_ray), with its runtime env


def tiny_config(workdir: Path, model: Path, backend: Backend, max_steps: int) -> Any:
    """A job small enough for any machine: 2 prompts x 2 samples a step, a checkpoint every step, one GPU."""
    from mmrl_api.trainer_config import TrainerConfig

    job_dir = workdir / JOB_DIR
    return TrainerConfig.model_validate(
        {
            "backend": backend,
            "job": {"namespace": "selftest", "name": "selftest"},
            "model": {"name": str(model)},
            "lora": {"rank": 8, "alpha": 16},
            "algorithm": {
                "samplesPerPrompt": 2,
                "trainBatchSize": 2,
                "miniBatchSize": 2,
                "learningRate": 1e-3,
                "maxSteps": max_steps,
                "maxPromptLength": 64,
                "maxResponseLength": 6,
            },
            "dataset": {"train": DATASET},
            "checkpoint": {"dir": str(job_dir), "interval_steps": 1, "keep": 2},
            "export_dir": str(job_dir / "adapter"),
            "placement": {"num_nodes": 1, "gpus_per_node": 1 if backend == "skyrl" else 0},
            "progress": {"enabled": False},
        }
    )


def train(cfg: Any) -> tuple[int, int | None]:
    """One attempt of the tiny job on its backend: (final step, step it resumed from)."""
    from mmrl_trainer import checkpoint as ckpt

    if cfg.backend == "local":
        from mmrl_trainer.backends import local

        result = local.run(cfg, evaluate=False)
        return result.final_step, result.resumed_from
    import ray

    from mmrl_trainer.backends import skyrl

    before = ckpt.latest_complete(cfg.checkpoint.dir)  # SkyRL's resume_mode=latest reads this same marker
    try:
        skyrl.run(cfg)
    finally:
        ray.shutdown()  # skyrl.run calls ray.init (utils.initialize_ray); the next run must be able to again
    return ckpt.read_marker(cfg.checkpoint.dir) or 0, before.step if before else None


def run_selftest(
    steps: int = 2,
    workdir: Path | None = None,
    backend: str = "auto",
    *,
    after_export: Callable[[Path], None] | None = None,
) -> Report:
    """Run every check; `after_export` runs between the export and the adapter check (tests break the adapter)."""
    from mmrl_trainer import checkpoint as ckpt

    work = workdir or Path(tempfile.gettempdir()) / "mmrl-selftest"
    chosen = choose_backend(backend)
    report = Report(backend=chosen, workdir=str(work))
    checks = _Checks(report)
    first = max(1, steps // 2)
    state: dict[str, Any] = {}

    def workdir_writable() -> str:
        shutil.rmtree(work / JOB_DIR, ignore_errors=True)  # a previous self-test's checkpoints would be resumed
        work.mkdir(parents=True, exist_ok=True)
        probe = work / ".probe"
        probe.write_text("ok")
        probe.unlink()
        return f"{work} ({shutil.disk_usage(work).free / 2**30:.1f} GiB free)"

    def hardware() -> str:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU here"
        if chosen == "skyrl":
            if not skyrl_available():
                raise RuntimeError("--backend skyrl needs SkyRL and it is not installed in this image")
            if not torch.cuda.is_available():
                gpus = ray_cluster_gpus()
                if not gpus:
                    raise RuntimeError("--backend skyrl needs a CUDA GPU: torch sees none here and no Ray cluster")
                gpu += f"; the Ray cluster has {gpus:g} GPU(s)"
        return f"backend {chosen}; torch {torch.__version__}; {gpu}"

    def tiny_model() -> str:
        from mmrl_trainer.tiny import build_tiny_vlm

        model = build_tiny_vlm()
        if chosen == "skyrl":
            # SkyRL's policy workers and vLLM engines load it on the GPU pods, not here: it must sit where every
            # Ray pod sees it (the workdir on the checkpoint volume, in a preflight).
            shared = work / "tiny-qwen3-vl"
            shutil.rmtree(shared, ignore_errors=True)
            shutil.copytree(model, shared)
            model = shared
        state["model"] = model
        return str(model)

    def skyrl_settings() -> str:
        from mmrl_trainer.backends.skyrl import checked_skyrl_config, shared_data
        from mmrl_trainer.backends.skyrl_config import skyrl_overrides

        cfg = tiny_config(work, state["model"], chosen, steps)
        data = shared_data(cfg)  # where the run puts them
        checked_skyrl_config(skyrl_overrides(cfg, train_files=data.train, val_files=data.val))
        return "SkyRL built and validated the settings (validate_cfg)"

    def train_and_checkpoint() -> str:
        cfg = tiny_config(work, state["model"], chosen, first)
        final, _ = train(cfg)
        done = ckpt.latest_complete(cfg.checkpoint.dir)
        if final != first or done is None or done.step != first:
            raise RuntimeError(f"expected a complete checkpoint of step {first}, found {done and done.step}")
        return f"{first} step(s); checkpoint {done.path.name} complete"

    def resume() -> str:
        cfg = tiny_config(work, state["model"], chosen, steps)
        state["cfg"] = cfg
        final, resumed = train(cfg)
        if resumed != first or final != steps:
            raise RuntimeError(f"expected to resume from step {first} and end at {steps}; got {resumed} → {final}")
        return f"resumed from step {resumed}, finished at step {final}"

    def export() -> str:
        from mmrl_trainer.adapter import CONFIG, WEIGHTS

        out = Path(state["cfg"].export_dir)
        sizes = {name: (out / name).stat().st_size for name in (CONFIG, WEIGHTS)}
        if after_export is not None:
            after_export(out)
        return f"{out}: " + ", ".join(f"{n} {s} B" for n, s in sizes.items())

    def adapter_check() -> str:
        from mmrl_trainer.adapter import check_adapter_dir

        cfg = state["cfg"]
        info = check_adapter_dir(cfg.export_dir, base_model=cfg.model.name)
        return f"vLLM can serve it: rank {info.rank}, --max-lora-rank {info.max_lora_rank}, sha256 {info.sha256[:12]}"

    checks.run("workdir", workdir_writable)
    checks.run("hardware", hardware)
    checks.run("tiny model", tiny_model)
    if chosen == "skyrl":
        checks.run("skyrl config", skyrl_settings)
    checks.run("train + checkpoint", train_and_checkpoint)
    checks.run("resume", resume)
    checks.run("export", export)
    checks.run("adapter check", adapter_check)
    return report


def format_table(report: Report) -> str:
    rows = [("CHECK", "RESULT", "TIME", "DETAIL")]
    rows += [(c.name, c.status, f"{c.seconds:.1f}s", c.detail) for c in report.checks]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join([*(r[i].ljust(widths[i]) for i in range(3)), r[3]]).rstrip() for r in rows]
    verdict = "PASS" if report.passed else "FAIL"
    total = sum(c.seconds for c in report.checks)
    return "\n".join([*lines, f"self-test {verdict} in {total:.1f}s (backend {report.backend}, {report.workdir})"])


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE} {SELFTEST}", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps in all (at least 2: checkpoint, resume)")
    parser.add_argument("--workdir", type=Path, help="where to train (default: a temporary directory, removed after)")
    parser.add_argument("--backend", choices=["auto", "local", "skyrl"], default="auto")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exit_:  # argparse: --help exits 0, a bad option 2
        return EXIT_OK if exit_.code in (0, None) else EXIT_BAD_CONFIG
    if args.steps < 2:
        print(
            error_line(f"--steps {args.steps}: the self-test needs at least 2 (checkpoint, then resume)"),
            file=sys.stderr,
        )
        return EXIT_BAD_CONFIG
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    temp = None if args.workdir else Path(tempfile.mkdtemp(prefix="mmrl-selftest-"))
    report = run_selftest(args.steps, args.workdir or temp, args.backend)
    print(report.to_json() if args.json else format_table(report), flush=True)
    if temp is not None and report.passed:
        shutil.rmtree(temp, ignore_errors=True)
    failed = report.first_failure()
    if failed is not None:
        print(error_line(f"self-test failed at {failed.name}: {failed.detail}"), file=sys.stderr, flush=True)
    return exit_code(report)


def exit_code(report: Report) -> int:
    return EXIT_OK if report.passed else EXIT_FAILED
