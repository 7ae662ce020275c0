"""The operator ↔ trainer process contract, run from both sides: the RayJob entrypoint the operator builds is
parsed and accepted by the trainer's own `main()`, the config path it names is where the job's ConfigMap lands on
every Ray pod, and the failure messages Ray produces for the trainer's exit codes classify as the operator expects.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from mmrl_api import contract
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.rayjob import build_rayjob
from mmrl_operator.core.builders.trainer_config import build_config_map
from mmrl_trainer.__main__ import main, parse_args
from tests.support.factories import job


def _pod_templates(rc: dict) -> list[dict]:
    return [rc["spec"]["headGroupSpec"]["template"]] + [g["template"] for g in rc["spec"]["workerGroupSpecs"]]


def _config_file_on_pod(template: dict, config_map: dict) -> set[str]:
    """Every path at which `config_map`'s keys appear inside a pod built from `template`."""
    spec = template["spec"]
    volumes = {
        v["name"] for v in spec["volumes"] if v.get("configMap", {}).get("name") == config_map["metadata"]["name"]
    }
    paths = set()
    for mount in spec["containers"][0]["volumeMounts"]:
        if mount["name"] in volumes:
            paths |= {f"{mount['mountPath']}/{key}" for key in config_map["data"]}
    return paths


@pytest.mark.parametrize("attempt", [1, 7])
def test_trainer_parses_the_entrypoint_the_operator_builds(attempt: int) -> None:
    j = job()
    argv = shlex.split(build_rayjob(j, attempt)["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", contract.MODULE]
    args = parse_args(argv[3:])
    assert args.attempt == attempt
    config_map = build_config_map(j)
    for template in _pod_templates(build_raycluster(j)):
        assert args.config in _config_file_on_pod(template, config_map)


def test_trainer_main_accepts_the_entrypoint_with_the_operators_config(tmp_path: Path) -> None:
    j = job()
    argv = shlex.split(build_rayjob(j, 2)["spec"]["entrypoint"])[3:]
    config_map = build_config_map(j)
    # A unit test has no /etc/mmrl: materialise the ConfigMap where the test can write and point --config there.
    (key,) = config_map["data"]
    local = tmp_path / key
    local.write_text(config_map["data"][key])
    index = argv.index("--config") + 1
    assert main([*argv[:index], str(local), *argv[index + 1 :], "--check"]) == contract.EXIT_OK


def test_unknown_arguments_and_bad_attempts_are_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", "/x.json", "--attempts", "2"]) == contract.EXIT_BAD_CONFIG
    assert main(["--config", "/x.json", "--attempt", "0"]) == contract.EXIT_BAD_CONFIG
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert contract.last_error_line(last) == "--attempt 0: attempts are numbered from 1"


@pytest.mark.parametrize(("code", "reason"), [(2, "InvalidConfig"), (3, "InvalidInput"), (1, None), (137, None)])
def test_ray_failure_messages_classify_by_the_trainers_exit_code(code: int, reason: str | None) -> None:
    # Ray's job supervisor: "Job entrypoint command failed with exit code N, last available logs ...:\n<tail>".
    tail = "INFO step 3\n" + contract.error_line("dataset.train: /fsx/x.parquet\nnot found")
    message = f"Job entrypoint command failed with exit code {code}, last available logs (truncated):\n{tail}"
    assert contract.fatal_reason(message) == reason
    assert contract.last_error_line(message) == "dataset.train: /fsx/x.parquet not found"


def test_a_message_without_an_exit_code_is_not_fatal() -> None:
    assert contract.fatal_reason("RayCluster geo not found.") is None
    assert contract.last_error_line("no trainer output") is None


def test_a_config_change_gives_the_next_attempt_a_new_digest_and_the_trainer_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = job()
    two = job({"spec": {"cluster": {"workerGroups": [{"name": "p5", "replicas": 2}]}}})
    argv_one = shlex.split(build_rayjob(one, 1)["spec"]["entrypoint"])[3:]
    argv_two = shlex.split(build_rayjob(two, 2)["spec"]["entrypoint"])[3:]
    digest = argv_two[argv_two.index("--config-sha256") + 1]
    assert digest != argv_one[argv_one.index("--config-sha256") + 1]
    # The mounted file still holds the old config (the kubelet has not synced the volume yet): no training on it.
    (key,) = build_config_map(one)["data"]
    stale = tmp_path / key
    stale.write_text(build_config_map(one)["data"][key])
    monkeypatch.setenv("MMRL_CONFIG_WAIT_SECONDS", "0")
    argv = [str(stale) if a == argv_two[argv_two.index("--config") + 1] else a for a in argv_two]
    assert main([*argv, "--check"]) == contract.EXIT_FAILED
    stale.write_text(build_config_map(two)["data"][key])
    assert main([*argv, "--check"]) == contract.EXIT_OK
