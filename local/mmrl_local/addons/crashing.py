"""The operator, made to end abruptly right after its k-th accepted API write (``MMRL_CRASH_AFTER_WRITES=k``), as a
SIGKILL would end it there: ``os._exit(137)``, no cleanup, no lease released. The operator HA test starts it this
way (``OperatorProcess(env={CRASH_AFTER_WRITES: k})``) to stop the operator between any two of its writes.

Test tooling: it wraps `Kube._wrote` in this process only; the operator itself carries no fault injector.
"""

from __future__ import annotations

import logging
import os
import threading

from mmrl_operator.cli.main import main
from mmrl_operator.runtime.kube import Kube

CRASH_AFTER_WRITES = "MMRL_CRASH_AFTER_WRITES"
EXIT_CODE = 137  # what a SIGKILLed process's shell reports


def install(after: int) -> None:
    """From now on this process exits right after its `after`-th accepted write, whichever thread makes it."""
    lock, done = threading.Lock(), [0]
    wrote = Kube._wrote

    def then_crash(self: Kube) -> None:
        wrote(self)
        with lock:
            done[0] += 1
            if done[0] >= after:
                logging.getLogger("mmrl.crashing").warning("fault injection: exiting after %d writes", done[0])
                os._exit(EXIT_CODE)

    Kube._wrote = then_crash  # type: ignore[method-assign]


if __name__ == "__main__":
    install(int(os.environ[CRASH_AFTER_WRITES]))
    raise SystemExit(main())
