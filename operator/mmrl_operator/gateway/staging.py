"""The gateway's store of staged adapters: content-addressed copies (`<store>/<digest>/`) of the adapter directories
the operator asked it to load, made by this process alone (vLLM mounts the store read-only), and the names it loaded
(`<store>/.held.json`, so a restarted gateway container knows them again; the emptyDir outlives both containers'
restarts, not the pod).

A copy is made while the source is read (`mmrl_api.adapter_digest`: every path component opened without following a
link, regular files only, bounded), into a temporary directory; only when the copy has the digest the trainer
reported and passes vLLM's adapter rules is it sealed read-only and renamed into place. So what vLLM loads are the
bytes that were checked, whatever the trainer's pods write to the claim afterwards. A copy already present is reused
(its name is its content), and a copy no loaded name points at is removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from mmrl_api import adapter_rules as rules
from mmrl_api.adapter_digest import Limits, TreeRefused, manifest_digest, read_tree
from mmrl_api.gateway_contract import staged_path

log = logging.getLogger("mmrl.gateway.staging")
STATE = ".held.json"
DEFAULT_LIMITS = Limits()
DIGEST_NAME = re.compile(r"^[0-9a-f]{64}$")
CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


class Refused(Exception):
    """The adapter is not staged: an HTTP status and one sentence that says why and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class _CopySink:
    """Where read_tree writes the copy: new files and directories under a directory of ours."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def directory(self, path: str) -> None:
        (self.root / path).mkdir()

    def file(self, path: str) -> BinaryIO:
        return open(self.root / path, "xb")  # read_tree closes it


def adapter_problems(path: Path, max_lora_rank: int | None, base_model: str | None) -> list[str]:
    """vLLM's adapter rules on the staged copy: its config, and the tensor names in its weights' header."""
    missing = [name for name in (CONFIG, WEIGHTS) if not (path / name).is_file()]
    if missing:
        return [f"{name} is missing (export with PEFT save_pretrained)" for name in missing]
    try:
        cfg = json.loads((path / CONFIG).read_text())
    except (ValueError, UnicodeDecodeError) as err:
        return [f"{CONFIG} is not JSON ({err})"]
    if not isinstance(cfg, dict):
        return [f"{CONFIG} is not a JSON object"]
    found = rules.config_violations(cfg, max_lora_rank=max_lora_rank, base_model=base_model)
    try:
        found += rules.tensor_violations(rules.safetensors_names(path / WEIGHTS))
    except (ValueError, struct.error) as err:
        return [*map(str, found), f"{WEIGHTS}: unreadable safetensors header ({err})"]
    return [str(v) for v in found]


class Store:
    def __init__(
        self,
        root: str | Path,
        adapter_roots: Iterable[str],
        limits: Limits = DEFAULT_LIMITS,
        max_lora_rank: int | None = None,
    ) -> None:
        self.root = Path(root)
        self.adapter_roots = [r.rstrip("/") for r in adapter_roots]
        self.limits, self.max_lora_rank = limits, max_lora_rank

    def path(self, digest: str) -> str:
        return staged_path(digest, str(self.root))

    def has(self, digest: str) -> bool:
        return DIGEST_NAME.match(digest) is not None and os.path.isdir(self.path(digest))

    def digests(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if DIGEST_NAME.match(p.name) and p.is_dir())

    # --- staging ------------------------------------------------------------------------------------------------
    def stage(self, source: str, digest: str, base_model: str | None = None) -> tuple[str, bool]:
        """(the staged copy's path, whether it was there already). Raises Refused."""
        if not any(source.startswith(root + "/") for root in self.adapter_roots):
            roots = ", ".join(self.adapter_roots) or "none"
            raise Refused(403, f"{source} is not under the server's adapter volumes ({roots})")
        if self.has(digest):
            return self.path(digest), True
        tmp = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.root))
        try:
            self._copy(source, digest, tmp, base_model)
            _seal(tmp)
            try:
                os.rename(tmp, self.path(digest))
            except OSError:
                if not self.has(digest):
                    raise
                _remove(tmp)  # the same content was staged meanwhile: one copy is enough
        except BaseException:
            _remove(tmp)
            raise
        return self.path(digest), False

    def _copy(self, source: str, digest: str, tmp: Path, base_model: str | None) -> None:
        try:
            found = manifest_digest(read_tree(source, self.limits, _CopySink(tmp)))
        except TreeRefused as err:
            raise Refused(422, f"the adapter at {source} is refused: {err}") from err
        except FileNotFoundError as err:
            raise Refused(404, f"no adapter directory at {source}") from err
        except PermissionError as err:
            raise Refused(
                403,
                f"the gateway (user {os.getuid()}) cannot read {err.filename or source} under {source}: the adapter's "
                "directories and files must be readable by other users (the trainer exports them so)",
            ) from err
        except OSError as err:
            raise Refused(500, f"the adapter at {source} could not be read: {err}") from err
        if found != digest:
            raise Refused(
                409,
                f"the adapter at {source} has digest {found}, not the reported {digest}: its files changed after "
                "the trainer reported them, or the report is wrong",
            )
        problems = adapter_problems(tmp, self.max_lora_rank, base_model)
        if problems:
            raise Refused(422, f"vLLM cannot serve the adapter at {source}: " + "; ".join(problems))

    def remove_unreferenced(self, keep: set[str]) -> list[str]:
        """Remove the copies no loaded name points at, and leftovers of copies cut short; the digests removed."""
        removed = []
        for entry in self.root.iterdir():
            if entry.name.startswith(".staging-") or (DIGEST_NAME.match(entry.name) and entry.name not in keep):
                _remove(entry)
                if not entry.name.startswith("."):
                    removed.append(entry.name)
        return removed

    # --- the names loaded, across the gateway's restarts -----------------------------------------------------------
    def load_state(self) -> dict[str, str]:
        try:
            held = json.loads((self.root / STATE).read_text())
        except FileNotFoundError:
            return {}
        except ValueError:
            log.warning("%s is unreadable; starting with nothing held", self.root / STATE)
            return {}
        return {str(k): str(v) for k, v in held.items() if DIGEST_NAME.match(str(v))}

    def save_state(self, held: dict[str, str]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self.root)
        with os.fdopen(fd, "w") as f:
            json.dump(held, f, sort_keys=True)
        os.replace(tmp, self.root / STATE)


def _seal(root: Path) -> None:
    """Read-only for everyone, the gateway's own user included: nothing changes a copy once it is checked."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o444)
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o555)
    os.chmod(root, 0o555)


def _remove(path: Path) -> None:
    """Remove a (sealed) copy: its directories are made writable again first."""
    if not path.exists():
        return
    for dirpath, _dirs, _files in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(dirpath, 0o755)
    shutil.rmtree(path, ignore_errors=True)
