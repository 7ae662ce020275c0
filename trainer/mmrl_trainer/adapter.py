"""The exported adapter: PEFT-format export, the file-level vLLM check, and the init-container command.

vLLM loads a LoRA adapter from `adapter_config.json` + `adapter_model.safetensors`. `check_adapter_dir` applies
the rules of `adapter_rules` to both files (the config, and the tensor names read from the safetensors header,
so no weights are loaded) and returns what the job's `status.adapter` reports, including the weights' sha256 and
the directory's digest (`mmrl_api.adapter_digest`: every file, config included), which a shared server's gateway
checks its copy against. The directory is read the way the gateway reads it: a link anywhere on its path or in it is
refused.

    python -m mmrl_trainer.adapter --adapter DIR --base-model M --max-lora-rank N [--sha256 S] [--copy-from SRC]

is the inference pod's init container: it copies the adapter from SRC (s3:// or a directory) when given, then
checks it; exit 3 (InvalidInput) with one `mmrl-trainer error:` line per broken rule, so the pod never starts a
vLLM server that would crash-loop or silently ignore weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmrl_api import adapter_rules as rules
from mmrl_api.adapter_digest import Entry, TreeRefused, manifest_digest, read_tree
from mmrl_api.contract import EXIT_BAD_INPUT, error_line
from mmrl_trainer.errors import InvalidInput

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


class AdapterError(InvalidInput):
    """The adapter cannot be served by vLLM; the message names each broken rule and its field."""

    def __init__(self, where: str, violations: list[rules.Violation]) -> None:
        super().__init__(f"{where}: " + "; ".join(str(v) for v in violations))
        self.violations = violations


@dataclass(frozen=True)
class AdapterInfo:
    path: Path
    rank: int
    alpha: float
    target_modules: list[str]
    base_model: str | None
    max_lora_rank: int
    """The smallest `--max-lora-rank` value vLLM accepts that fits this adapter."""
    sha256: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    """The rule-relevant subset of adapter_config.json (see adapter_rules.RULE_KEYS)."""
    digest: str = ""
    """sha256 of the directory's manifest (`mmrl_api.adapter_digest`)."""

    def status(self, path: str | None = None) -> dict[str, Any]:
        """`status.adapter` as the trainer reports it (camelCase, as the CRD stores it)."""
        return {
            "path": path or str(self.path),
            "rank": self.rank,
            "alpha": self.alpha,
            "targetModules": self.target_modules,
            "baseModel": self.base_model or "",
            "sha256": self.sha256,
            "maxLoraRank": self.max_lora_rank,
            "config": self.config,
            "digest": self.digest,
        }


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_adapter_dir(
    adapter_dir: str | Path,
    *,
    max_lora_rank: int | None = None,
    base_model: str | None = None,
    sha256: str | None = None,
) -> AdapterInfo:
    """Apply every rule to the adapter files; raise AdapterError naming all that break."""
    path = Path(adapter_dir)
    # A link would have a server (a shared one among others) read whatever it points at, as the server.
    try:
        entries = read_tree(os.path.join(os.getcwd(), path))
    except TreeRefused as err:
        raise AdapterError(str(path), [rules.Violation("files", str(path), str(err))]) from err
    except FileNotFoundError:
        entries = []
    missing = [
        rules.Violation("files", name, "is missing") for name in (CONFIG, WEIGHTS) if not (path / name).is_file()
    ]
    if missing:
        raise AdapterError(f"{path} (export with PEFT save_pretrained)", missing)
    cfg = json.loads((path / CONFIG).read_text())
    found = rules.config_violations(cfg, max_lora_rank=max_lora_rank, base_model=base_model)
    try:
        found += rules.tensor_violations(rules.safetensors_names(path / WEIGHTS))
    except (ValueError, struct.error) as exc:
        found.append(rules.Violation("files", WEIGHTS, f"unreadable safetensors header ({exc})"))
    digest = _weights_sha256(entries) or sha256_file(path / WEIGHTS)
    if sha256 and digest != sha256:
        found.append(rules.Violation("sha256", WEIGHTS, f"sha256 {digest} differs from the reported {sha256}"))
    if found:
        raise AdapterError(str(path / CONFIG), found)
    rank = rules.max_rank(cfg)
    return AdapterInfo(
        path=path,
        rank=rank,
        alpha=float(cfg.get("lora_alpha", rank)),
        target_modules=sorted(rules.targets(cfg)),
        base_model=cfg.get("base_model_name_or_path"),
        max_lora_rank=rules.smallest_max_lora_rank(rank),
        sha256=digest,
        config=rules.rule_subset(cfg),
        digest=manifest_digest(entries),
    )


def _weights_sha256(entries: list[Entry]) -> str:
    return next((e.sha256 for e in entries if e.path == WEIGHTS), "")


def export_adapter(peft_model, export_dir: str | Path, *, base_model: str | None = None) -> AdapterInfo:
    """Save the LoRA weights in PEFT format to `export_dir` (replaced atomically) and verify vLLM can serve them."""
    target = Path(export_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    peft_model.save_pretrained(staging)
    if base_model:
        cfg_file = staging / CONFIG
        cfg = json.loads(cfg_file.read_text())
        cfg["base_model_name_or_path"] = base_model
        cfg_file.write_text(json.dumps(cfg, indent=2))
    info = check_adapter_dir(staging, base_model=base_model)
    readable_by_all(staging)
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return AdapterInfo(**{**info.__dict__, "path": target})


def readable_by_all(root: Path) -> None:
    """Directories 0755, files 0644: a server runs as another user than the trainer (a shared server's gateway as
    the operator image's), and mkdtemp (0700) or a strict umask would keep it out."""
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)


def copy_adapter(source: str, dest: Path) -> None:
    """Fetch the adapter into `dest`: from S3 (boto3, the pod's IRSA / pod-identity credentials) or a directory."""
    dest.mkdir(parents=True, exist_ok=True)
    if source.startswith("s3://"):
        import boto3  # the trainer image carries it (SkyRL's S3 checkpointing)

        bucket, _, prefix = source.removeprefix("s3://").partition("/")
        s3 = boto3.client("s3")
        for name in (CONFIG, WEIGHTS):
            s3.download_file(bucket, f"{prefix.rstrip('/')}/{name}", str(dest / name))
        return
    for name in (CONFIG, WEIGHTS):
        shutil.copyfile(Path(source) / name, dest / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmrl_trainer.adapter", description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", required=True, help="directory vLLM will load the adapter from")
    parser.add_argument("--base-model", help="the model vLLM serves; the adapter must have been trained on it")
    parser.add_argument("--max-lora-rank", type=int, help="vLLM's --max-lora-rank")
    parser.add_argument("--sha256", help="expected sha256 of adapter_model.safetensors (from status.adapter)")
    parser.add_argument("--copy-from", help="fetch the adapter from here (s3://... or a directory) first")
    args = parser.parse_args(argv)
    try:
        if args.copy_from:
            copy_adapter(args.copy_from, Path(args.adapter))
        info = check_adapter_dir(
            args.adapter, max_lora_rank=args.max_lora_rank, base_model=args.base_model, sha256=args.sha256
        )
    except AdapterError as err:
        for v in err.violations:
            print(error_line(str(v)), file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as err:
        print(error_line(f"cannot read the adapter: {err}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"adapter {info.path}: rank {info.rank}, targets {info.target_modules}, sha256 {info.sha256}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
