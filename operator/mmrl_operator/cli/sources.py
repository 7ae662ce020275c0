"""What `-f` names, as kubectl reads it: a file, a directory (each of its *.yaml and *.yml files, in name order, not
recursively) or `-` (standard input, read once)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mmrl_operator.cli.errors import UserError

STDIN = "-"
STDIN_NAME = "<stdin>"
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Source:
    name: str
    """How messages name it: the path as given, a directory's file under the directory, or <stdin>."""
    text: str
    named: bool = True
    """Named on the command line (a directory's files are not): one without any mmrl object is an error."""

    def documents(self) -> list[Any]:
        """The YAML documents, empty ones left out; UserError naming the source when it does not parse."""
        import yaml

        try:
            return [d for d in yaml.safe_load_all(self.text) if d is not None]
        except yaml.YAMLError as exc:
            raise UserError(f"{self.name}: invalid YAML: {' '.join(str(exc).split())}") from None


def read_sources(given: Iterable[str], stdin: TextIO | None = None) -> list[Source]:
    """The sources in the order given. UserError for a path that does not exist, a directory without YAML files,
    or `-` given twice."""
    out: list[Source] = []
    for item in given:
        if item == STDIN:
            if any(s.name == STDIN_NAME for s in out):
                raise UserError("-f -: standard input can be read only once")
            out.append(Source(STDIN_NAME, (stdin or sys.stdin).read()))
            continue
        path = Path(item)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in YAML_SUFFIXES and p.is_file())
            if not files:
                raise UserError(f"{item}: a directory without *.yaml or *.yml files")
            out += [Source(str(p), _read(p), named=False) for p in files]
        else:
            out.append(Source(item, _read(path)))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file or directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
