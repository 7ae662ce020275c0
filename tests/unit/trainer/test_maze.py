"""The built-in maze environment is exact per seed: same maze and pictures, scripted solutions earn known rewards."""

from __future__ import annotations

import pytest

from mmrl_api.environment import EnvironmentSpec
from mmrl_api.spec import DatasetSpec
from mmrl_trainer.data import load_examples
from mmrl_trainer.envs import make_episode
from mmrl_trainer.envs.grid import AGENT, GOAL, WALL, generate
from mmrl_trainer.envs.maze import MIN_SUCCESS_REWARD, PROGRESS_REWARD, MazeEpisode, parse_move
from mmrl_trainer.envs.maze_data import SEED_STRIDE
from mmrl_trainer.errors import InvalidInput

# Seed 3 of the default 5x5 maze, pinned: a change to generation would silently change every maze dataset.
SEED3 = "#A...\n##.##\n...G.\n#....\n.#..."
SEED3_SOLUTION = ("right", "down", "down", "right")


def test_the_same_seed_gives_the_same_maze_and_the_same_pictures() -> None:
    a, b = MazeEpisode(), MazeEpisode()
    first_a, first_b = a.reset(11), b.reset(11)
    assert first_a.image is not None and first_b.image is not None
    assert first_a.image.tobytes() == first_b.image.tobytes() and first_a.text == first_b.text
    for reply in ("<answer>up</answer>", "left", "down"):
        sa, sb = a.step(reply), b.step(reply)
        assert sa.observation.image.tobytes() == sb.observation.image.tobytes()
        assert (sa.reward, sa.done, sa.info) == (sb.reward, sb.done, sb.info)
    assert generate(3).text(generate(3).start) == SEED3
    assert generate(3).solution == SEED3_SOLUTION
    assert len({generate(s).text(generate(s).start) for s in range(20)}) == 20


def test_the_picture_shows_agent_goal_and_walls_in_their_colours() -> None:
    episode = MazeEpisode(params={"cell": "8"})
    image = episode.reset(3).image
    assert image is not None and image.size == (40, 40)
    centre = lambda row, col: image.getpixel((col * 8 + 4, row * 8 + 4))  # noqa: E731
    assert (centre(0, 1), centre(2, 3), centre(0, 0)) == (AGENT, GOAL, WALL)


def test_a_scripted_shortest_path_reaches_the_goal_with_full_reward() -> None:
    episode = MazeEpisode()
    episode.reset(3)
    results = [episode.step(f"I will go <answer>{move}</answer>") for move in SEED3_SOLUTION]
    assert [r.reward for r in results] == [0.0, 0.0, 0.0, 1.0]
    assert [r.done for r in results] == [False, False, False, True]
    assert results[-1].info == {"turns": 4, "success": True, "move": "right", "moved": True, "shortest": 4}
    with pytest.raises(RuntimeError):
        episode.step("up")


def test_invalid_and_blocked_moves_spend_a_turn_and_cost_the_per_move_penalty() -> None:
    episode = MazeEpisode()
    episode.reset(3)
    nothing = episode.step("I am not sure.")
    assert (nothing.info["move"], nothing.info["moved"], nothing.reward, nothing.done) == (None, False, 0.0, False)
    assert "No move found" in nothing.observation.text and "14 moves left" in nothing.observation.text
    blocked = episode.step("<answer>down</answer>")  # a wall below the start
    assert (blocked.info["move"], blocked.info["moved"]) == ("down", False)
    edge = episode.step("up")  # off the top edge
    assert edge.info["moved"] is False and episode.agent == (0, 1)
    last = [episode.step(move) for move in SEED3_SOLUTION][-1]
    assert last.done and last.info["turns"] == 7 and last.reward == pytest.approx(1.0 - 0.05 * 3)


def test_running_out_of_turns_ends_the_episode_unrewarded() -> None:
    episode = MazeEpisode(max_turns=3)
    episode.reset(3)
    results = [episode.step("left") for _ in range(3)]  # left, then into the wall twice
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].reward == 0.0 and results[-1].info["success"] is False
    assert "No moves left" in results[-1].observation.text


def test_a_slow_success_still_beats_failure() -> None:
    episode = MazeEpisode(params={"penalty": "0.2"}, max_turns=64)
    episode.reset(3)
    for _ in range(20):
        episode.step("left")
    assert [episode.step(m) for m in SEED3_SOLUTION][-1].reward == 0.1


@pytest.mark.parametrize(
    ("reply", "move"),
    [
        ("<answer>left</answer>", "left"),
        ("Up would hit a wall, so I go RIGHT", "right"),
        ("<answer>down</answer> (not up)", "down"),
        ("<answer>up</answer> then <answer> Left </answer>", "left"),
        ("left<|im_end|>", "left"),
        ("upward and onward", None),
        ("<answer>forward</answer> left", None),
    ],
)
def test_moves_are_read_leniently_from_the_reply(reply: str, move: str | None) -> None:
    assert parse_move(reply) == move


def test_corner_ends_start_top_left_and_end_bottom_right() -> None:
    for seed in range(20):
        maze = generate(seed, size=4, wall_fraction=0.4, ends="corners")
        assert (maze.start, maze.goal) == ((0, 0), (3, 3)) and not {maze.start, maze.goal} & maze.walls
        assert maze == generate(seed, size=4, wall_fraction=0.4, ends="corners")
    assert generate(1, size=3, wall_fraction=0.3, ends="corners").text((0, 0)) == "A..\n#..\n..G"
    assert generate(3).text(generate(3).start) == SEED3  # the default (random ends) is unchanged


def test_shaped_reward_pays_each_turns_progress_and_sums_to_the_goal_reward_plus_progress() -> None:
    # Seed 1, 3x3, corners: A.. / #.. / ..G, shortest path 4, so each step of progress pays 0.5 / 4.
    episode = MazeEpisode({"size": "3", "walls": "0.3", "ends": "corners", "reward": "shaped"})
    episode.reset(1)
    replies = ["up", "right", "left", "down", "right", "down", "down", "right"]
    results = [episode.step(reply) for reply in replies]
    # Blocked (edge), toward, away, blocked (wall), toward x3, and the goal: 0.125 plus 1.0 less 4 extra moves x 0.05.
    assert [r.reward for r in results] == [0.0, 0.125, -0.125, 0.0, 0.125, 0.125, 0.125, 0.925]
    assert results[-1].done and results[-1].info["success"]
    assert sum(r.reward for r in results) == pytest.approx(0.8 + PROGRESS_REWARD)
    # Short of the goal, the progress made is all an episode earns, less than any success.
    short = MazeEpisode({"size": "3", "walls": "0.3", "ends": "corners", "reward": "shaped"}, max_turns=2)
    short.reset(1)
    assert [short.step(reply).reward for reply in ("right", "down")] == [0.125, 0.125]
    assert MIN_SUCCESS_REWARD + PROGRESS_REWARD > PROGRESS_REWARD * (1 - 1 / 4)


def test_text_observations_draw_the_maze_as_rows() -> None:
    first = MazeEpisode(images=False).reset(3)
    assert first.image is None and first.text.endswith(SEED3)
    moved = MazeEpisode(images=False)
    moved.reset(3)
    assert moved.step("right").observation.text.endswith("#.A..\n##.##\n...G.\n#....\n.#...")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"colour": "red"}, "params.colour"),
        ({"size": "9"}, "params.size"),
        ({"walls": "many"}, "params.walls"),
        ({"ends": "middle"}, "params.ends"),
        ({"reward": "dense"}, "params.reward"),
    ],
)
def test_bad_params_are_refused_naming_the_field(params: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput, match=f"spec.dataset.environment.{field}"):
        make_episode(EnvironmentSpec(name="maze", params=params))


def test_a_custom_class_is_imported_and_a_missing_one_names_the_field() -> None:
    spec = EnvironmentSpec(name="custom", class_path="mmrl_trainer.envs.maze:MazeEpisode", max_turns=2)
    episode = make_episode(spec)()
    episode.reset(3)
    assert episode.step("x").done is False and episode.step("x").done is True
    with pytest.raises(
        InvalidInput, match=r"spec\.dataset\.environment\.class: 'mmrl_trainer\.envs\.maze' has no class 'Nope'"
    ):
        make_episode(EnvironmentSpec(name="custom", class_path="mmrl_trainer.envs.maze:Nope"))


def test_the_maze_dataset_rows_are_the_episodes_first_observations() -> None:
    environment = EnvironmentSpec(name="maze", params={"size": "4", "cell": "10"})
    spec = DatasetSpec(train="synthetic://maze", environment=environment)
    train = load_examples("synthetic://maze?n=8&seed=0", spec)
    validation = load_examples("synthetic://maze?n=4&seed=1", spec)
    assert [e.extra["seed"] for e in validation] == [SEED_STRIDE + i for i in range(4)]
    assert not {e.extra["seed"] for e in train} & {e.extra["seed"] for e in validation}
    row = validation[2]
    first = make_episode(environment)().reset(row.extra["seed"])
    assert row.prompt == first.text and row.images[0].tobytes() == first.image.tobytes()
    assert row.images[0].size == (40, 40)
    assert row.answer == " ".join(generate(row.extra["seed"], size=4).solution)
