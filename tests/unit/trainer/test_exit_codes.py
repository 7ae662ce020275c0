"""Which failures the operator retries: the trainer's exit code for our typed errors, for errors that come back
from Ray tasks (they subclass the remote exception's type) and for settings SkyRL's own config checks reject."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mmrl_api.contract import EXIT_BAD_CONFIG, EXIT_BAD_INPUT, EXIT_FAILED, fatal_reason, last_error_line
from mmrl_trainer.adapter import AdapterError
from mmrl_trainer.errors import InvalidConfig, InvalidInput, exit_code_for
from tests.support.skyrl import skyrl_python
from tests.unit.trainer.skyrl_job import ROOT, skyrl_config_file


def test_typed_errors_exit_2_and_3_and_a_bare_value_error_is_retried() -> None:
    assert exit_code_for(InvalidConfig("spec.cluster.workerGroups: ...")) == EXIT_BAD_CONFIG
    assert exit_code_for(InvalidInput("dataset 'x': ...")) == EXIT_BAD_INPUT
    assert exit_code_for(AdapterError("adapter", [])) == EXIT_BAD_INPUT
    assert exit_code_for(ValueError("a library bug")) == EXIT_FAILED
    assert exit_code_for(AssertionError("a library bug")) == EXIT_FAILED


def test_an_error_that_comes_back_from_a_ray_task_is_an_application_failure() -> None:
    from ray.exceptions import RayTaskError

    for cause in (ValueError("remote"), InvalidInput("remote row"), InvalidConfig("remote")):
        err = RayTaskError("entry", "Traceback ...", cause).as_instanceof_cause()
        assert isinstance(err, type(cause))  # what made every remote ValueError look like bad input
        assert exit_code_for(err) == EXIT_FAILED


_RAY_ENTRY = r"""
import sys, ray
from mmrl_trainer.errors import InvalidInput, exit_code_for
ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)

@ray.remote
def task():
    raise InvalidInput("dataset row 3: bad image")

try:
    ray.get(task.remote())
except Exception as err:
    print(type(err).__name__, isinstance(err, ValueError), exit_code_for(err))
finally:
    ray.shutdown()
"""


def test_a_value_error_raised_inside_a_real_ray_task_exits_1(tmp_path: Path) -> None:
    env = {"PYTHONPATH": f"{ROOT / 'api'}:{ROOT / 'trainer'}", "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", _RAY_ENTRY], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split()[-3:] == ["RayTaskError(InvalidInput)", "True", str(EXIT_FAILED)]


_MAIN = r"""
import sys, typing
if sys.version_info < (3, 12):  # skyrl's pydantic models need typing_extensions.TypedDict before 3.12
    import typing_extensions; typing.TypedDict = typing_extensions.TypedDict
from mmrl_trainer.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_settings_skyrl_rejects_exit_2_with_skyrl_message_before_anything_starts(tmp_path: Path) -> None:
    # 8 GPUs, 1 prompt per mini-batch and 4 samples: SkyRL's validate_batch_sizes asserts 1*4 // 8 > 0.
    config = skyrl_config_file(tmp_path, gpus_per_node=8, algorithm={"miniBatchSize": 1, "trainBatchSize": 4})
    env = {"PYTHONPATH": f"{ROOT / 'api'}:{ROOT / 'trainer'}", "HOME": str(tmp_path)}
    run = subprocess.run(
        [str(skyrl_python()), "-c", _MAIN, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == EXIT_BAD_CONFIG, run.stderr[-3000:]
    message = last_error_line(run.stderr)
    assert message is not None and "SkyRL rejected" in message and "policy_mini_batch_size_per_gpu" in message
    assert fatal_reason(f"Job entrypoint command failed with exit code {run.returncode}") == "InvalidConfig"
    assert not (tmp_path / "job" / "global_step_1").exists()
    assert json.loads(config.read_text())["backend"] == "skyrl"
