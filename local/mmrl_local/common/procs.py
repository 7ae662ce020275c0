"""Start child processes that cannot outlive us: each runs in its own process group (so stopping it also
stops anything it forked), asks the kernel to SIGKILL it if our thread dies (PR_SET_PDEATHSIG, covering a
SIGKILLed pytest), and is registered for an atexit / SIGTERM / SIGHUP sweep (covering ordinary exits and
interrupted test runs).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1
# The environment variable that marks a run (a test session, a demo): every process the run starts, pods included,
# inherits it, so what a run left behind can be told from what other runs on the machine own (``leftovers``).
RUN_MARK = "MMRL_RUN_MARK"
_live: list[subprocess.Popen] = []
_lock = threading.Lock()
_handlers_installed = False


def set_parent_death_signal() -> None:
    """Ask the kernel to SIGKILL this process when the thread that started it dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    args: list[str],
    log: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = True,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen:
    """Start ``args`` in a new session with stdout+stderr appended to ``log`` (``pass_fds`` stay open in it)."""
    _install_handlers()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=set_parent_death_signal if die_with_parent else None,
            pass_fds=pass_fds,
        )
    with _lock:
        _live.append(proc)
    return proc


def stop_together(processes: list[subprocess.Popen], timeout: float = 5.0) -> None:
    """Stop several at once: SIGTERM every group first, so the whole set takes one grace period, not one each."""
    for proc in processes:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in processes:
        stop(proc, timeout)


def stop(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``timeout``, and reap the leader."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    # Even when the leader exited, members of its group may linger.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)
    with _lock:
        if proc in _live:
            _live.remove(proc)


def stop_all() -> None:
    with _lock:
        procs = list(reversed(_live))
    stop_together(procs, timeout=3.0)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie. A process that vanishes while its stat is read (the kernel
    answers ENOENT, or ESRCH for one that is exiting) is gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if pid_alive(p)]
    return alive


def _on_signal(signum, frame) -> None:
    stop_all()
    previous = _previous.get(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL or previous is None:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


_previous: dict[int, object] = {}


def _install_handlers() -> None:
    global _handlers_installed
    if not _handlers_installed:
        _handlers_installed = True
        atexit.register(stop_all)
    # Signal handlers can only be set from the main thread; until a main-thread spawn sets them,
    # atexit + PDEATHSIG still cover us.
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is not _on_signal:
                _previous[signum] = signal.getsignal(signum)
                signal.signal(signum, _on_signal)
