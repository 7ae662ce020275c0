"""The shell blocks of a how-to page (docs/quickstart-hyperpod.md), as the tests run them.

Every ```sh block of such a page carries an HTML comment on the line above it, which a reader of the rendered page
never sees: `<!-- run: NAME -->` (a test runs the block as written, by that name) or `<!-- not run here: WHY -->`
(it needs what this machine has not: AWS, a registry, GPUs, a running job). A test runs a block with bash, in a
directory and environment it prepares (the variables the page's earlier steps export, helm and kubectl on PATH),
so a command the page shows is a command that ran.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart-hyperpod.md"
MARKER = re.compile(r"^<!-- (run: (?P<name>[a-z0-9-]+)|not run here: (?P<why>.+?)) -->$")
FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int
    """The line of the opening fence, counted from 1."""
    name: str | None = None
    """The name a test runs it by (`<!-- run: NAME -->`)."""
    why_not: str | None = None
    """Why no test runs it (`<!-- not run here: WHY -->`)."""


def blocks(page: Path = QUICKSTART) -> list[Block]:
    """The fenced code blocks of a markdown page, each with the marker on the line above it, if any."""
    lines = page.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.match(lines[i - 1]) if i else None
        out.append(
            Block(
                lang=fence["lang"],
                text="\n".join(lines[i + 1 : end]) + "\n",
                line=i + 1,
                name=marker["name"] if marker else None,
                why_not=marker["why"] if marker else None,
            )
        )
        i = end + 1
    return out


def block(name: str, page: Path = QUICKSTART) -> Block:
    """The block a test runs by `name`."""
    found = [b for b in blocks(page) if b.name == name]
    assert len(found) == 1, f"{page.name}: {len(found)} blocks marked <!-- run: {name} -->"
    return found[0]


def shell_env(extra: dict[str, str], *, path: list[Path] = (), home: Path | None = None) -> dict[str, str]:
    """The environment a block runs in: this venv's commands (`mmrl`, `python`) and `path` first on PATH, the
    checkout's sources importable (tests/conftest.py's PYTHONPATH), and the variables the page told the reader to
    export."""
    dirs = [*map(str, path), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    env = {"PATH": os.pathsep.join(dirs), "PYTHONPATH": os.environ["PYTHONPATH"], "LANG": "C.UTF-8"}
    if home is not None:
        env["HOME"] = str(home)
    return {**env, **extra}


def run(b: Block, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the block with bash as a reader pastes it, stopping at the first failing command."""
    assert b.lang == "sh", f"line {b.line}: a {b.lang or 'plain'} block is not a command"
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", b.text], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def ran(b: Block, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run the block; its stdout, or an AssertionError with the block's line and what it printed."""
    done = run(b, cwd, env, timeout)
    assert done.returncode == 0, f"{QUICKSTART.name}:{b.line} ({b.name}) exited {done.returncode}:\n{done.stderr}"
    return done.stdout
