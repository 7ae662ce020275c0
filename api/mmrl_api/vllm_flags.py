"""The vLLM flags the operator sets itself, which `extraArgs` may not name (a ModelServer's or a job's inference).

The operator builds vLLM's command line from the spec's fields, and its fit checks (an adapter's rank against
`--max-lora-rank`, a job's trained context against `--max-model-len`, the adapters held against `--max-cpu-loras`,
the pixel cap) and the gateway (vLLM on loopback, plain HTTP, no key of its own) assume those values. An
`extraArgs` entry that set one of them again would win (vLLM's parser keeps the last) and silently break what was
checked, so it is refused at admission (CEL on each entry), in `mmrl validate` and by the operator, naming the
entry and the field to set instead.

What counts as naming a flag is what vLLM's parser accepts (tests/unit/api/test_vllm_flags.py checks it against
the real one): `--flag`, `--flag=value`, underscores for dashes, a JSON field of it (`--flag.key value`), and any
abbreviation (argparse's `allow_abbrev`, on in vLLM), so every prefix of an owned flag is refused, even one that
vLLM would find ambiguous. `-tp` is `--tensor-parallel-size`; `--no-enable-lora` turns LoRA off.
"""

from __future__ import annotations

import re

from mmrl_api.rules import Rule

# Each owned flag (its long spelling, without the dashes) and what sets it instead.
OWNED: dict[str, str] = {
    "model": "model.name",
    "served-model-name": "the operator (the base model's name)",
    "enable-lora": "the operator",
    "no-enable-lora": "the operator",
    "lora-modules": "the operator (adapters are loaded by it)",
    "max-lora-rank": "maxLoraRank",
    "max-loras": "maxLoras",
    "max-cpu-loras": "maxAdapters",
    "tensor-parallel-size": "tensorParallelSize",
    "limit-mm-per-prompt": "maxImagesPerPrompt",
    "max-model-len": "maxModelLen",
    "mm-processor-kwargs": "maxImagePixels (the job's training pixel cap for a dedicated server)",
    "gpu-memory-utilization": "gpuMemoryUtilization",
    "device-memory-utilization": "gpuMemoryUtilization",
    "revision": "model.revision",
    "load-format": "the operator (from model.name)",
    "host": "the operator (vLLM listens where the operator and the gateway expect it)",
    "port": "the operator (vLLM listens where the operator and the gateway expect it)",
    "uds": "the operator (vLLM listens where the operator and the gateway expect it)",
    "ssl-keyfile": "the operator (the operator and the gateway speak plain HTTP to vLLM)",
    "ssl-certfile": "the operator (the operator and the gateway speak plain HTTP to vLLM)",
    "api-key": "env VLLM_API_KEY (a key for clients, which the gateway sends too)",
    "config": "the fields above (a config file could set any of them)",
}
SHORT_OWNED = {"tp": "tensorParallelSize"}


def _prefixes(names: list[str]) -> str:
    """A regex for any non-empty prefix of any of ``names``, a dash also matching an underscore (as vLLM's parser
    reads them): the trie of the names, every node a possible end."""
    trie: dict = {}
    for name in names:
        node = trie
        for char in name:
            node = node.setdefault(char, {})

    def walk(node: dict) -> str:
        branches = []
        for char, child in sorted(node.items()):
            head = "[-_]" if char == "-" else re.escape(char)
            branches.append(head + (f"(?:{walk(child)})?" if child else ""))
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return walk(trie)


# `--` and a prefix of an owned long flag, ending there or followed by `=value` or `.field`; or `-t`/`-tp` (the
# short spelling of --tensor-parallel-size, and its one-letter abbreviation), also with `=value`.
OWNED_FLAG_RE = rf"^(?:--{_prefixes(sorted(OWNED))}|-{_prefixes(sorted(SHORT_OWNED))})(?:[=.].*)?$"

OWNED_FLAG_MESSAGE = (
    "sets a vLLM flag the operator sets itself from the spec's fields (or abbreviates one): vLLM would take the "
    "last value and break what the operator checked; set the field instead (docs/serving.md, extraArgs)"
)

NOT_AN_OWNED_FLAG = Rule(OWNED_FLAG_RE, OWNED_FLAG_MESSAGE, must_match=False)


def owned_flag(arg: str) -> str | None:
    """The owned flag ``arg`` names (``--max-lora-rank`` for ``--max_lora_r=8``), or None. Where a prefix could be
    several, the first in order."""
    if NOT_AN_OWNED_FLAG.holds(arg):
        return None
    short = not arg.startswith("--")
    name = re.split(r"[=.]", arg.lstrip("-"), maxsplit=1)[0].replace("_", "-")
    table = SHORT_OWNED if short else OWNED
    return next(("-" if short else "--") + flag for flag in sorted(table) if flag.startswith(name))


def instead(arg: str) -> str:
    """What ``mmrl validate`` adds to the message: the flag the entry names and the field that sets it."""
    flag = owned_flag(arg)
    if flag is None:
        return ""
    field = (SHORT_OWNED if not flag.startswith("--") else OWNED)[flag.lstrip("-")]
    return f" ({flag}: {field})"
