"""`python -m mmrl_trainer --config FILE [--attempt N] [--backend local|skyrl] [--check] [--dry-run]`: the RayJob
entrypoint.

Exit codes are part of the contract with the operator (mmrl_api.contract): 0 the job trained and exported its
adapter; 2 the command line or the config file is invalid, or SkyRL rejects the settings made from it; 3 the data,
model or adapter is unusable (fix the spec, retrying will not help); 1 anything else, including every failure that
comes back from a Ray task (an unexpected failure, possibly transient); the mapping is `errors.exit_code_for`. On
failure the last line printed is `mmrl-trainer error: <message>`, which the operator copies into the job's status.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping

from pydantic import ValidationError

from mmrl_api.contract import EXIT_BAD_CONFIG, EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, MODULE, SELFTEST, error_line
from mmrl_trainer.errors import exit_code_for

__all__ = ["EXIT_BAD_CONFIG", "EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "main", "parse_args"]

log = logging.getLogger("mmrl_trainer")


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise _ArgumentError(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The trainer's command line; raises ValueError with argparse's message on a bad one."""
    parser = _Parser(prog=f"python -m {MODULE}", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--config", required=True, help="TrainerConfig JSON (the operator's ConfigMap)")
    parser.add_argument("--attempt", type=int, default=1, help="attempt number (RayJob <job>-a<N>), for logs/metrics")
    parser.add_argument("--backend", choices=["local", "skyrl"], help="override the config's backend")
    parser.add_argument("--config-sha256", help="wait until the config file has this digest (a ConfigMap update)")
    parser.add_argument("--check", action="store_true", help="validate the command line and config, then exit")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would run (settings, paths, footprint), start nothing"
    )
    try:
        args = parser.parse_args(argv)
    except _ArgumentError as err:
        raise ValueError(f"{parser.prog}: {err}") from None
    if args.attempt < 1:
        raise ValueError(f"--attempt {args.attempt}: attempts are numbered from 1")
    return args


def _fail(code: int, message: str) -> int:
    print(error_line(message), file=sys.stderr, flush=True)
    return code


def report_adapter(  # type: ignore[no-untyped-def]
    cfg, attempt: int, adapter_dir, path: str | None = None, *, step: int | None = None, held_out: float | None = None
) -> None:
    """Tell the operator what it will serve: status.adapter from the exported files (checked again here), at `path`
    when the files were uploaded from `adapter_dir` (s3://), with its held-out evaluation (the promotion gate reads
    it) and lineage. `step`: the training step it was exported at; `held_out`: its held-out reward, when measured."""
    from mmrl_trainer.adapter import check_adapter_dir
    from mmrl_trainer.lineage import adapter_evaluation, adapter_lineage
    from mmrl_trainer.progress import ProgressReporter

    info = check_adapter_dir(adapter_dir, base_model=cfg.model.name)
    reporter = ProgressReporter.from_config(cfg, attempt=attempt)
    status = info.status(path)
    status["evaluation"] = adapter_evaluation(reporter.metrics_file, step, held_out)
    status["lineage"] = adapter_lineage(cfg, step)
    if not reporter.adapter(status):
        log.warning("could not report the adapter; the inference pod's init container checks it on its own")


def allocator_env(backend: str, env: Mapping[str, str]) -> dict[str, str]:
    """The local backend's CUDA allocator setting, unless the user set one. Without expandable segments TRL's
    growing generation and training tensors fragment the cache: on an H200 a 1.6B model's step peaked at 21.6 GiB
    allocated but 77.4 GiB reserved; with them, 23.2 GiB (bench/measured). SkyRL sets it in its own workers."""
    if backend != "local" or "PYTORCH_CUDA_ALLOC_CONF" in env:
        return {}
    return {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == [SELFTEST]:  # `python -m mmrl_trainer selftest ...`: the image self-test, not a training run
        from mmrl_trainer import selftest

        return selftest.main(words[1:])
    try:
        args = parse_args(argv)
    except ValueError as err:
        return _fail(EXIT_BAD_CONFIG, str(err))
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s %(levelname)s %(name)s attempt={args.attempt} %(message)s"
    )

    from mmrl_api.trainer_config import TrainerConfig, wait_for_digest

    if args.config_sha256 and not wait_for_digest(args.config, args.config_sha256):
        return _fail(
            EXIT_FAILED, f"config {args.config} never reached digest {args.config_sha256[:12]} of this attempt"
        )
    try:
        cfg = TrainerConfig.load(args.config)
    except (OSError, ValueError, ValidationError) as err:
        return _fail(EXIT_BAD_CONFIG, f"config {args.config} is invalid: {err}")
    if args.backend:
        cfg = cfg.model_copy(update={"backend": args.backend})
    if not (args.check or args.dry_run):
        from mmrl_trainer import attempt_log

        attempt_log.start(cfg.checkpoint.dir, args.attempt)  # <jobDir>/logs/attempt-N.log outlives this attempt
    log.info("job %s/%s: backend=%s resume=%s", cfg.job.namespace, cfg.job.name, cfg.backend, cfg.resume)
    if args.check:
        return EXIT_OK
    if args.dry_run:
        from mmrl_trainer.dry_run import describe

        try:
            print(describe(cfg, attempt=args.attempt), flush=True)
        except ValueError as err:
            return _fail(EXIT_BAD_CONFIG, str(err))
        return EXIT_OK
    os.environ.update(allocator_env(cfg.backend, os.environ))
    try:
        from mmrl_trainer.memory_check import check_memory

        check_memory(cfg)  # before any engine or model load: a job that cannot fit fails now, exit 2
        if cfg.backend == "local":
            from mmrl_trainer.backends import local

            result = local.run(cfg, attempt=args.attempt)
            log.info(
                "finished at step %d (resumed from %s); adapter %s; held-out reward %s",
                result.final_step,
                result.resumed_from,
                result.adapter_dir,
                result.held_out_reward,
            )
            report_adapter(
                cfg, args.attempt, result.adapter_dir, step=result.final_step, held_out=result.held_out_reward
            )
        else:
            from mmrl_trainer.backends import skyrl

            exported = skyrl.run(cfg, attempt=args.attempt)
            report_adapter(cfg, args.attempt, exported.local, path=exported.path, step=exported.step)
    except Exception as err:
        code = exit_code_for(err)  # typed: InvalidConfig 2, InvalidInput 3, Ray task failures and the rest 1
        if code == EXIT_FAILED:
            log.exception("training failed")
            return _fail(code, f"training failed: {type(err).__name__}: {err}")
        log.error("%s", err)
        return _fail(code, str(err))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
