"""Start Python programs from a process that already imported them: a fork server.

The operator's imports (kopf, aiohttp, the Kubernetes client, pydantic) cost about 2 s of CPU; a test run starts the
operator a few hundred times, on 2 shared cores. The server imports the modules once, then forks one child per
request. Each child is a whole new operator process as far as anything outside can tell: its own session and process
group (so `killpg` stops it), its own argv, environment and log file, stdin from /dev/null, default signal
dispositions. Only the imports are shared, and those run the same code either way. One thing differs: a module that
read its environment at import time holds the server's. The operator reads its own settings when it runs (run.py);
the one such value among its dependencies, the Kubernetes client's default kubeconfig path (which kopf's login and
`load_kube_config()` use), is read again in each child (`_IMPORT_TIME_ENV`).

The server is single-threaded on purpose: fork copies only the calling thread, so a server with threads could hand
a child a lock some other thread held. It checks that before it serves anything.

What the kernel shows of a child (``/proc/PID/cmdline`` and ``environ``) stays the server's: those are the memory
the server was started with, which a fork copies and no ``sys.argv`` or ``os.environ`` change rewrites. So the
leftovers check (``mmrl_local.leftovers``) knows a child by the server's command line, and its run by the server's
run mark (``procs.RUN_MARK``). For that mark to be the child's own, a server forks only for its own run: a request
whose env carries another run's mark is refused.

Protocol, one Unix-socket connection per child: the client sends one JSON line
``{"module", "args", "env", "log"}``; the server answers ``{"pid": N}`` when the child exists and ``{"rc": N}``
when it has exited (Popen's convention: -N for a signal), then closes the connection; or ``{"error": "..."}`` when
it refuses the request.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from mmrl_local.common import procs


class ForkedProcess:
    """The client's handle on one child: the part of ``subprocess.Popen`` that callers use (pid, poll, wait)."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self.pid, self._conn, self._buf = pid, conn, b""
        self.returncode: int | None = None

    def _read(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        self._conn.settimeout(timeout)
        try:
            while b"\n" not in self._buf:
                chunk = self._conn.recv(4096)
                if not chunk:  # the server went away without a word: the child went with it (it kills its children)
                    self.returncode = -signal.SIGKILL
                    return
                self._buf += chunk
        except (TimeoutError, BlockingIOError):
            return
        finally:
            with contextlib.suppress(OSError):
                self._conn.settimeout(None)
        self.returncode = int(json.loads(self._buf.split(b"\n", 1)[0])["rc"])
        self._conn.close()

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout or 0)
        return self.returncode


class ForkServer:
    """Runs the server process (``python -m mmrl_local.common.forkserver``) and asks it for children."""

    def __init__(self, modules: list[str], socket_path: Path, log: Path) -> None:
        self.modules, self.socket_path, self.log = modules, socket_path, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> ForkServer:
        self.socket_path.unlink(missing_ok=True)
        self.proc = procs.spawn(
            [sys.executable, "-m", "mmrl_local.common.forkserver", str(self.socket_path), *self.modules], self.log
        )
        return self

    def ready(self, timeout: float = 120.0) -> None:
        """Wait until the server has imported its modules and listens (its socket appears then)."""
        deadline = time.monotonic() + timeout
        while not self.socket_path.exists():
            if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
                raise RuntimeError(f"the fork server did not start (log {self.log}):\n{tail}")
            time.sleep(0.05)

    def spawn(self, module: str, args: list[str], env: dict[str, str], log: Path) -> ForkedProcess:
        self.ready()
        return spawn(self.socket_path, module, args, env, log)

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc)
        self.socket_path.unlink(missing_ok=True)


def spawn(socket_path: Path, module: str, args: list[str], env: dict[str, str], log: Path) -> ForkedProcess:
    """Ask the server listening on ``socket_path`` to run ``python -m module *args`` with exactly ``env``, its
    output appended to ``log``."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(socket_path))
    conn.sendall(json.dumps({"module": module, "args": args, "env": env, "log": str(log)}).encode() + b"\n")
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            raise RuntimeError(f"the fork server at {socket_path} closed the connection before forking {module}")
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    answer = json.loads(line)
    if "error" in answer:
        conn.close()
        raise RuntimeError(f"the fork server at {socket_path} did not fork {module}: {answer['error']}")
    child = ForkedProcess(conn, int(answer["pid"]))
    child._buf = rest
    return child


# --- the server process -----------------------------------------------------------------------------------------

# Module attributes that their module computes from the environment when imported: (module, attribute, variable,
# default). A child sets them again from its own environment, as its own import would have.
_IMPORT_TIME_ENV = (("kubernetes.config.kube_config", "KUBE_CONFIG_DEFAULT_LOCATION", "KUBECONFIG", "~/.kube/config"),)


def _reread_import_time_env() -> None:
    for module, attribute, variable, default in _IMPORT_TIME_ENV:
        if module in sys.modules:
            setattr(sys.modules[module], attribute, os.environ.get(variable, default))


def _child(request: dict, listener: socket.socket, conns: list[socket.socket]) -> None:
    """In the forked child: become a fresh process running ``request["module"]`` as __main__; never returns."""
    rc = 1
    try:
        listener.close()
        for conn in conns:
            conn.close()
        os.setsid()
        procs.set_parent_death_signal()  # the server is gone: so is every child it forked
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        _reread_import_time_env()
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as exit_:
        code = exit_.code
        rc = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(rc)


def _send(conn: socket.socket, message: dict) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def refusal(request: dict, own_mark: str | None) -> str | None:
    """Why the server does not fork for ``request``, or None. Its child would carry the server's run mark where the
    kernel shows it, whatever the request's env says: a request of another run is refused."""
    theirs = request["env"].get(procs.RUN_MARK)
    if theirs is None or theirs == own_mark:
        return None
    return (
        f"its env carries the run mark {procs.RUN_MARK}={theirs} and this server belongs to "
        f"{'the run ' + own_mark if own_mark else 'no run'}: start a fork server of that run's own"
    )


def serve(socket_path: str, modules: list[str]) -> None:
    own_mark = os.environ.get(procs.RUN_MARK)
    for name in modules:
        importlib.import_module(name)
    if threading.active_count() != 1:
        names = [t.name for t in threading.enumerate()]
        raise SystemExit(f"importing {modules} started threads {names}: forking this process would not be safe")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{socket_path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    listener.bind(tmp)
    listener.listen(64)
    os.rename(tmp, socket_path)  # the socket appears only once it listens: that is the "ready" signal
    children: dict[int, socket.socket] = {}
    pending: dict[socket.socket, bytes] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping:
        for key, _ in sel.select(timeout=0.05):
            if key.fileobj is listener:
                conn, _addr = listener.accept()
                pending[conn] = b""
                sel.register(conn, selectors.EVENT_READ)
                continue
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            chunk = conn.recv(65536)
            if not chunk:  # a client that hung up: its child (if any) runs on, and is reaped below
                sel.unregister(conn)
                pending.pop(conn, None)
                continue
            if conn not in pending:
                continue
            pending[conn] += chunk
            if b"\n" not in pending[conn]:
                continue
            request = json.loads(pending.pop(conn).split(b"\n", 1)[0])
            sel.unregister(conn)
            refused = refusal(request, own_mark)
            if refused is not None:
                _send(conn, {"error": refused})
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                _child(request, listener, [*children.values(), *pending, conn])
            children[pid] = conn
            _send(conn, {"pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                _send(conn, {"rc": os.waitstatus_to_exitcode(status)})
                conn.close()
    for pid in children:  # going away: nothing we forked outlives us
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for pid in children:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
