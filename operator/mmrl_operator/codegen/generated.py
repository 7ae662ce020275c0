"""The command line every generator shares: `--out DIR` writes the generated files, `--check DIR` fails (exit 1)
when a committed file differs from what the code generates now, so CI catches a forgotten `make crds`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def generator_main(description: str, render: Callable[[], dict[str, str]], argv: list[str] | None = None) -> int:
    """`render` returns {path relative to DIR: content}."""
    parser = argparse.ArgumentParser(description=description)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="write the generated files into this directory")
    group.add_argument("--check", type=Path, help="fail if a generated file in this directory is stale")
    args = parser.parse_args(argv)
    files = render()
    if args.out:
        for rel, text in files.items():
            target = args.out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {target} ({len(text.encode())} bytes)")
        return 0
    stale = [str(args.check / rel) for rel, text in files.items() if _read(args.check / rel) != text]
    if stale:
        print(f"{', '.join(stale)} stale: run `make crds` and commit the result", file=sys.stderr)
        return 1
    print(f"{args.check}: {', '.join(files)} up to date")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None
