"""Datasets with images in every supported form, the synthetic task, and the per-backend row formats."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from mmrl_api.spec import DatasetSpec
from mmrl_trainer import data, synthetic


def png(colour: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return buf.getvalue()


def test_jsonl_with_file_data_uri_and_bare_base64_images(tmp_path: Path) -> None:
    (tmp_path / "red.png").write_bytes(png((255, 0, 0)))
    b64 = base64.b64encode(png((0, 0, 255))).decode()
    rows = [
        {"q": "colour?", "imgs": ["red.png"], "a": "red", "source": "file"},
        {"q": "colour?", "imgs": f"data:image/png;base64,{b64}", "a": "blue"},
        {"q": "colour?", "imgs": [b64, str(tmp_path / "red.png")], "a": 7},
    ]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    spec = DatasetSpec(train=str(tmp_path / "train.jsonl"), prompt_field="q", images_field="imgs", answer_field="a")
    ex = data.load_examples(spec.train, spec)
    assert [e.answer for e in ex] == ["red", "blue", "7"]
    assert [len(e.images) for e in ex] == [1, 1, 2]
    assert ex[0].images[0].getpixel((0, 0)) == (255, 0, 0)
    assert ex[1].images[0].getpixel((0, 0)) == (0, 0, 255)
    assert ex[0].extra["source"] == "file"


def test_parquet_directory_with_hf_image_structs(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(
        [{"prompt": "colour?", "images": [{"bytes": png((0, 255, 0)), "path": None}], "answer": "green"}]
    )
    pq.write_table(table, tmp_path / "part-0.parquet")
    ex = data.load_examples(str(tmp_path), DatasetSpec(train=str(tmp_path)))
    assert ex[0].images[0].getpixel((1, 1)) == (0, 255, 0) and ex[0].answer == "green"


def test_missing_column_names_the_spec_field(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text(json.dumps({"prompt": "x", "images": []}))
    spec = DatasetSpec(train=str(tmp_path / "t.jsonl"), format="jsonl")
    with pytest.raises(ValueError, match=r"missing column 'answer' \(named by dataset\.answerField\)"):
        data.load_examples(spec.train, spec)


def test_missing_path_is_reported_with_the_uri(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        data.load_examples(str(tmp_path / "nope.parquet"), DatasetSpec(train=str(tmp_path / "nope.parquet")))


def test_object_store_reader_resolves_relative_images_on_the_same_filesystem(tmp_path: Path) -> None:
    # The s3:// path runs exactly this code with pyarrow's S3FileSystem; a LocalFileSystem stands in for it here.
    import pyarrow.fs as pafs

    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.png").write_bytes(png((9, 9, 9)))
    (tmp_path / "part.jsonl").write_text(json.dumps({"prompt": "p", "images": ["imgs/a.png"], "answer": "a"}))
    fs = pafs.LocalFileSystem()
    rows, base = data._fs_records(fs, str(tmp_path), "jsonl")
    read = data._read_s3(fs, base)
    rec = next(iter(rows))
    assert data.decode_image(rec["images"][0], read).getpixel((0, 0)) == (9, 9, 9)


def test_hf_uris_go_through_datasets_with_split_and_config(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        img = Image.new("RGB", (4, 4), (7, 8, 9))
        return datasets.Dataset.from_list([{"problem": "q", "images": [img], "answer": "4"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    spec = DatasetSpec(train="hf://hiyouga/geometry3k?split=test", prompt_field="problem")
    ex = data.load_examples(spec.train, spec)
    assert calls == [("hiyouga/geometry3k", None, "test")]
    assert ex[0].answer == "4" and ex[0].images[0].getpixel((0, 0)) == (7, 8, 9)


def test_synthetic_colours_are_reproducible_and_parameterised() -> None:
    a = data.load_examples("synthetic://colors?n=12&seed=3", DatasetSpec(train="synthetic://colors"))
    b = synthetic.synthetic_examples("synthetic://colors?n=12&seed=3")
    assert len(a) == 12
    assert [e.answer for e in a] == [e.answer for e in b]
    assert a[0].images[0].tobytes() == b[0].images[0].tobytes()
    assert set(e.answer for e in synthetic.colour_examples(200, 0)) == set(synthetic.COLOURS)
    with pytest.raises(ValueError, match="known: colors"):
        synthetic.parse_synthetic_uri("synthetic://shapes")
    with pytest.raises(ValueError, match="unknown parameters"):
        synthetic.parse_synthetic_uri("synthetic://colors?count=3")


def test_synthetic_images_carry_the_answer_colour() -> None:
    for e in synthetic.colour_examples(16, 5):
        mean = e.images[0].resize((1, 1), Image.Resampling.BOX).getpixel((0, 0))

        def distance(colour: str, mean=mean) -> float:
            # Patterned images mix full and 70% shades, so compare against a slightly darkened palette.
            return sum((synthetic.COLOURS[colour][i] * 0.85 - mean[i]) ** 2 for i in range(3))

        assert min(synthetic.COLOURS, key=distance) == e.answer


def test_our_skyrl_rows_have_the_keys_and_image_parts_of_skyrls_vlm_contract() -> None:
    ex = synthetic.colour_examples(2, 0)
    rows = data.to_skyrl_rows(ex, data_source="synthetic://colors")
    row = rows[0]
    assert set(row) == {"prompt", "env_class", "reward_spec", "data_source", "extra_info"}
    assert row["env_class"] == data.SKYRL_ENV_CLASS
    assert row["reward_spec"] == {"method": "rule", "ground_truth": ex[0].answer}
    parts = row["prompt"][0]["content"]
    assert row["prompt"][0]["role"] == "user"
    assert parts[0]["type"] == "image_url" and parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert data.decode_image(parts[0]["image_url"]["url"]).tobytes() == ex[0].images[0].tobytes()
    assert parts[1] == {"type": "text", "text": synthetic.QUESTION}


def test_trl_rows_and_chat_prompts_place_images_in_order() -> None:
    ex = synthetic.Example(
        prompt=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"}]},
        ],
        images=[Image.new("RGB", (4, 4), (1, 2, 3)), Image.new("RGB", (4, 4), (4, 5, 6))],
        answer="x",
    )
    row = data.to_trl_rows([ex])[0]
    assert row["prompt"][1]["content"] == [{"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"}]
    assert row["images"] == ex.images and row["answer"] == "x"
    sky = data.to_skyrl_rows([ex], data_source="d")[0]["prompt"][1]["content"]
    assert [p["type"] for p in sky] == ["image_url", "text", "image_url"]
    assert data.decode_image(sky[2]["image_url"]["url"]).getpixel((0, 0)) == (4, 5, 6)


def test_our_skyrl_parquet_round_trips_through_pyarrow(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    rows = data.to_skyrl_rows(synthetic.colour_examples(3, 1), data_source="synthetic://colors")
    back = pq.read_table(data.write_parquet(rows, tmp_path / "train.parquet")).to_pylist()
    assert [r["reward_spec"]["ground_truth"] for r in back] == [r["reward_spec"]["ground_truth"] for r in rows]
    assert json.loads(back[0]["extra_info"])["split_index"] == 0


def test_a_skyrl_gym_datasets_extra_columns_become_columns_skyrl_hands_the_environment(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    # SkyRL's VisGym rows: a placeholder prompt, the environment id and a seed, no answer column; jsonl rows may
    # lack a column another row has.
    rows = [
        {"prompt": "placeholder", "visgym_env_id": "maze_2d/easy", "seed": 7, "visgym_kwargs": {"size": 5}},
        {"prompt": "placeholder", "visgym_env_id": "counting/easy"},
    ]
    path = tmp_path / "visgym.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    environment = {"name": "skyrl-gym", "class": "examples.train.visgym.env:VisGymEnv"}
    spec = DatasetSpec.model_validate({"train": str(path), "format": "jsonl", "environment": environment})
    examples = data.load_examples(str(path), spec)
    written = data.write_skyrl_data(examples, spec, data_source="visgym", path=tmp_path / "train.parquet")
    back = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert [r["env_class"] for r in back] == [data.SKYRL_GYM_ENV_CLASS] * 2
    # What SkyRL's PromptDataset hands the environment: every column but prompt and env_class, as the row had it.
    extras = [{k: v for k, v in r.items() if k not in data.SKYRL_ROW_KEYS} for r in back]
    assert [(e["visgym_env_id"], e["seed"], e["visgym_kwargs"]) for e in extras] == [
        ("maze_2d/easy", 7, {"size": 5}),
        ("counting/easy", None, None),
    ]
    assert "extra_info" not in back[0] and back[0]["data_source"] == "visgym"
    assert len(written) == 2 and written[0]["prompt"][0]["content"] == [{"type": "text", "text": "placeholder"}]


def test_our_own_environments_rows_keep_their_extras_in_extra_info(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    spec = DatasetSpec.model_validate({"train": "synthetic://maze?n=2", "environment": {"name": "maze"}})
    examples = data.load_examples(spec.train, spec)
    data.write_skyrl_data(examples, spec, data_source="maze", path=tmp_path / "train.parquet")
    back = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert [r["env_class"] for r in back] == [data.SKYRL_EPISODE_ENV_CLASS] * 2
    assert [json.loads(r["extra_info"])["seed"] for r in back] == [0, 1] and "seed" not in back[0]


def test_rows_whose_column_changes_type_are_refused_as_bad_input(tmp_path: Path) -> None:
    rows = [{"prompt": [{"role": "user", "content": "q"}], "env_class": "e", "seed": 1}, {"seed": "one"}]
    with pytest.raises(data.InvalidInput, match="different types in different rows"):
        data.write_parquet(rows, tmp_path / "t.parquet", json_text=())
