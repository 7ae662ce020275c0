"""A job's own SkyRL-Gym environment (`environment.name: skyrl-gym`) runs in SkyRL with no adapter of ours.

The environment (tests/skyrl/shade_env.py) is written as SkyRL's examples write theirs: a BaseTextEnv subclass that
reads its row from `extras` (the dataset's `shade`, `seed` and `meta` columns, and SkyRL's max_turns), takes its
param as a registration kwarg, shows an image every turn and reports get_metrics. Everything on the way is ours or
SkyRL's own, as in test_skyrl_maze_episodes.py: our driver writes SkyRL's parquet from the user's dataset
(backends/skyrl.py:materialise_data) and registers the class as our entry task does (skyrl_gym_registration); then
SkyRL's PromptDataset, prepare_generator_input, BasePPOExp.get_generator and SkyRLVLMGymGenerator play the episodes,
with only the inference engine's HTTP answers scripted (one reply per turn, whatever the row). The metrics SkyRL
aggregates from get_metrics then go through our progress hook to the status and a real TensorBoard sink.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mmrl_trainer.backends.skyrl import skyrl_gym_registration
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.backends.skyrl_progress import SkyRLProgress
from mmrl_trainer.data import SKYRL_GYM_ENV_CLASS
from mmrl_trainer.progress import ProgressReporter
from mmrl_trainer.tiny import build_tokenizer
from mmrl_trainer.tracking import Tracker
from mmrl_trainer.tracking.sinks import TensorBoardSink
from tests.support.skyrl import SCRIPTED_EPISODES, last_json, run_skyrl
from tests.unit.trainer.test_skyrl_overrides import reference_overrides

SHADE_ENV = "tests.skyrl.shade_env:ShadeEnv"
SHADES = ["red", "blue", "green"]
MAX_TURNS = 4
# One reply per turn for every episode: "red" is named at turns 2 and 3, "blue" at 1 and 4, "green" never.
SCRIPT = ["blue", "red", "red", "blue"]

_GYM = (
    r"""
import json, sys
from pathlib import Path
from transformers import AutoTokenizer
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.backends.skyrl import materialise_data
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
from mmrl_trainer.errors import InvalidInput
from tests.skyrl import shade_env

config, data_dir, tokenizer_dir, script, registration = sys.argv[1:6]
script, registration = json.loads(script), json.loads(registration)
job = TrainerConfig.load(config)
cfg = build_skyrl_config(json.load(sys.stdin))
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)

# The driver's check of the class: a class that is not a skyrl_gym Env is bad input naming the field.
not_an_env = job.model_copy(update={"dataset": job.dataset.model_copy(update={
    "environment": job.dataset.environment.model_copy(update={"class_path": "tests.skyrl.shade_env:square"})})})
try:
    materialise_data(not_an_env, Path(data_dir) / "refused")
    refused = None
except InvalidInput as err:
    refused = str(err)
data = materialise_data(job, Path(data_dir))
parquet = data.train[0]
"""
    + SCRIPTED_EPISODES
    + r"""
print(json.dumps({
    "refused": refused,
    "envs": generator_input["env_classes"],
    "built": shade_env.BUILT,
    "rewards": rewards,
    "turns": turns,
    "renders": renders,
    "metrics": out["rollout_metrics"],
}))
"""
)


def user_dataset(path: Path) -> Path:
    """The job's own rows, as a SkyRL user writes them: a prompt, no answer, and the columns its environment reads."""
    rows = [
        {"prompt": "Name the colour.", "shade": shade, "seed": 10 + i, "meta": {"level": i}}
        for i, shade in enumerate(SHADES)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_a_skyrl_gym_class_plays_episodes_with_its_rows_extras_and_params_and_its_metrics_reach_status(
    tmp_path: Path,
) -> None:
    environment = {"name": "skyrl-gym", "class": SHADE_ENV, "params": {"hits": "2"}, "maxTurns": MAX_TURNS}
    dataset = {
        "train": str(user_dataset(tmp_path / "shades.parquet")),
        "validation": None,
        "promptField": "prompt",
        "reward": None,
    }
    patch = {"spec": {"algorithm": {"samplesPerPrompt": 2}, "dataset": {**dataset, "environment": environment}}}
    _, cfg = reference_overrides(patch)
    config = tmp_path / "trainer.json"
    config.write_text(cfg.to_json())
    tokenizer = build_tokenizer()
    tokenizer.add_tokens(SHADES)  # the tiny model's vocabulary has no colour words of its own
    tokenizer.save_pretrained(tmp_path / "tok")
    data_dir = tmp_path / "data"
    overrides = skyrl_overrides(
        cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": str(tmp_path / "tok")})}),
        train_files=[str(data_dir / "train.parquet")],
        val_files=[],
    )
    registration = skyrl_gym_registration(cfg)
    got = last_json(
        run_skyrl(
            _GYM,
            str(config),
            str(data_dir),
            str(tmp_path / "tok"),
            json.dumps(SCRIPT),
            json.dumps(registration),
            stdin=json.dumps(overrides),
        )
    )
    assert got["refused"].startswith("spec.dataset.environment.class: 'tests.skyrl.shade_env' has no skyrl_gym Env")
    assert got["envs"] == [SKYRL_GYM_ENV_CLASS] * 6
    # Each episode's class got its row's columns as extras, as the dataset had them, SkyRL's max_turns, and the
    # spec's param as a keyword argument (SkyRL builds the episodes' environments concurrently, in any order).
    rows = [(shade, 10 + i, {"level": i}) for i, shade in enumerate(SHADES) for _ in range(2)]
    built = [(b["extras"]["shade"], b["extras"]["seed"], b["extras"]["meta"]) for b in got["built"]]
    assert sorted(built, key=lambda b: b[1]) == rows
    assert {(b["extras"]["max_turns"], b["hits"]) for b in got["built"]} == {(MAX_TURNS, 2)}
    # red is named twice by turn 3, blue by turn 4; green never, so its episodes end at maxTurns unrewarded.
    assert got["rewards"] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert got["turns"] == [3, 3, 4, 4, 4, 4]
    # An image every turn, and every earlier turn's image still in the conversation.
    assert got["renders"] and all(images == replies + 1 for replies, images in got["renders"])
    metrics = got["metrics"]
    assert (metrics["environment/success"], metrics["environment/hits"]) == (4 / 6, 8 / 6)
    assert metrics["environment/turns"] == 22 / 6

    # SkyRL logs these with the step's other metrics; our hook maps them to the status and the tracking sinks.
    patches: list[dict] = []
    progress = SkyRLProgress(ProgressReporter(tmp_path / "metrics.jsonl", patches.append, min_interval=0), "s3://x/y")
    progress.reporter.tracker = Tracker([TensorBoardSink(tmp_path, purge_step=None)])
    progress.on_log(1, 5, {**metrics, "reward/avg_raw_reward": 4 / 6})
    progress.on_train_end(1, 5)
    episodes = patches[0]["status"]["progress"]["episodes"]
    assert (episodes["successRate"], episodes["turns"]) == (0.6667, 3.6667)
    assert episodes["tokens"] == round(metrics["generate/avg_num_tokens"], 4)
    logged = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert (logged["episode_success"], logged["episode_turns"]) == (4 / 6, 22 / 6)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    scalars = {t: [round(e.value, 4) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    assert scalars["episode_success"] == scalars["skyrl/environment/success"] == [0.6667]
    assert scalars["skyrl/environment/hits"] == [1.3333]
