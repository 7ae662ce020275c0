"""`python -m mmrl_trainer --config FILE [--backend local|skyrl]`: the RayJob entrypoint.

Exit codes are part of the contract with the operator: 0 the job trained and exported its adapter; 2 the command
line or the config file is invalid; 3 the data, model or adapter is unusable (fix the spec, retrying will not
help); 1 anything else (an unexpected failure, possibly transient). All non-zero codes are application failures.
"""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG, EXIT_BAD_INPUT = 0, 1, 2, 3

log = logging.getLogger("mmrl_trainer")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmrl_trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="TrainerConfig JSON (the operator's ConfigMap)")
    parser.add_argument("--backend", choices=["local", "skyrl"], help="override the config's backend")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    from mmrl_trainer.config import TrainerConfig

    try:
        cfg = TrainerConfig.load(args.config)
    except (OSError, ValueError, ValidationError) as err:
        log.error("config %s is invalid: %s", args.config, err)
        return EXIT_BAD_CONFIG
    if args.backend:
        cfg = cfg.model_copy(update={"backend": args.backend})
    log.info("job %s/%s: backend=%s resume=%s", cfg.job.namespace, cfg.job.name, cfg.backend, cfg.resume)
    try:
        if cfg.backend == "local":
            from mmrl_trainer.backends import local

            result = local.run(cfg)
            log.info(
                "finished at step %d (resumed from %s); adapter %s; held-out reward %s",
                result.final_step,
                result.resumed_from,
                result.adapter_dir,
                result.held_out_reward,
            )
        else:
            from mmrl_trainer.backends import skyrl

            skyrl.run(cfg)
    except ValueError as err:  # our loaders and the adapter check raise ValueError with a user-facing message
        log.error("%s", err)
        return EXIT_BAD_INPUT
    except Exception:
        log.exception("training failed")
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
