"""The `mmrl` command's one error handler: a user's mistake is one line on stderr and exit status 1, never a traceback.

A user error is anything the user can fix without reading mmrl's code: a missing kubeconfig or context, a file that
does not exist, YAML that does not parse, an object that is not there, a permission the apiserver refuses, a cluster
that cannot be reached. API errors read as kubectl prints them (`Error from server (NotFound): ...`). Anything else
is a bug and keeps its traceback. A closed stdout (`mmrl validate f | head -1`) ends the command quietly, like other
Unix tools: exit status 141, as a shell reports a process that SIGPIPE stopped.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

EXIT_FAILED = 1
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


class UserError(Exception):
    """A mistake the message alone lets the user fix; printed as is."""


def run_guarded(command: Callable[[], int]) -> int:
    """Run a command; its exit status, or the error handler's."""
    try:
        code = command()
        sys.stdout.flush()  # here, not at interpreter exit, where a closed pipe could only be reported
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        message = user_message(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXIT_FAILED


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit does not raise BrokenPipeError again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (a test's capture): nothing will flush into the pipe
        pass


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def user_message(exc: BaseException) -> str | None:
    """The one line to print for a user error, or None for a bug."""
    if isinstance(exc, UserError):
        return f"error: {exc}"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"error: {exc.filename}: {exc.strerror or _one_line(exc)}"
    if "yaml" in sys.modules:
        import yaml

        if isinstance(exc, yaml.YAMLError):
            return f"error: invalid YAML: {_one_line(exc)}"
    if "kubernetes" in sys.modules:  # the only way to get its exceptions is to have imported it
        return _kubernetes_message(exc)
    return None


def _kubernetes_message(exc: BaseException) -> str | None:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        return api_error_message(exc.status, exc.reason, exc.body)
    if isinstance(exc, ConfigException):
        return f"error: kubeconfig: {_one_line(exc)}"
    if isinstance(exc, HTTPError):
        reason = getattr(exc, "reason", None) or exc
        return f"error: cannot reach the cluster: {_one_line(reason)}"
    return None


def api_error_message(status: int | None, reason: str | None, body: Any) -> str:
    """kubectl's form: `Error from server (NotFound): multimodalrljobs.mmrl.dev "geo" not found`."""
    message, kind = None, reason
    try:
        parsed = json.loads(body) if isinstance(body, str | bytes) else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        message, kind = parsed.get("message"), parsed.get("reason") or reason
    text = _one_line(message or reason or f"HTTP {status}")
    if status == 404 and "could not find the requested resource" in text:
        text += " (is the mmrl operator installed? Its chart installs the CRDs: docs/install.md)"
    return f"Error from server ({kind or status}): {text}"
