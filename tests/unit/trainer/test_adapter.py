"""The adapter rules refuse what vLLM cannot serve (or would silently mis-serve), naming the rule and the field;
the init-container command applies them to real files and exits 3 with one error line per broken rule."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from mmrl_api import adapter_rules as rules
from mmrl_api.contract import ERROR_PREFIX, EXIT_BAD_INPUT
from mmrl_trainer.adapter import AdapterError, check_adapter_dir, main, sha256_file

BASE = "Qwen/Qwen3-VL-8B-Instruct"
TEXT_TENSORS = (
    "base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight",
    "base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_B.weight",
)


def config(**overrides) -> dict:
    return {
        "peft_type": "LORA",
        "r": 32,
        "lora_alpha": 32,
        "target_modules": ["q_proj", "v_proj"],
        "bias": "none",
        "use_dora": False,
        "modules_to_save": None,
        "init_lora_weights": True,
        "base_model_name_or_path": BASE,
        **overrides,
    }


def adapter(tmp_path: Path, tensors=TEXT_TENSORS, **overrides) -> Path:
    (tmp_path / "adapter_config.json").write_text(json.dumps(config(**overrides)))
    save_file(
        {name: np.zeros((2, 2), dtype=np.float32) for name in tensors}, str(tmp_path / "adapter_model.safetensors")
    )
    return tmp_path


@pytest.mark.parametrize(
    ("overrides", "rule", "field"),
    [
        ({"modules_to_save": ["lm_head"]}, "modules-to-save", "modules_to_save"),
        ({"use_dora": True}, "dora", "use_dora"),
        ({"lora_bias": True}, "lora-bias", "lora_bias"),
        ({"bias": "lora_only"}, "bias", "bias"),
        ({"init_lora_weights": "pissa"}, "init-lora-weights", "init_lora_weights"),
        ({"init_lora_weights": "loftq"}, "init-lora-weights", "init_lora_weights"),
        ({"alora_invocation_tokens": [1, 2]}, "alora", "alora_invocation_tokens"),
        ({"layer_replication": [[0, 2]]}, "layer-replication", "layer_replication"),
        ({"use_qalora": True}, "qalora", "use_qalora"),
        ({"target_modules": ["q_proj", "lm_head"]}, "forbidden-target", "target_modules"),
        ({"target_modules": ["model.embed_tokens"]}, "forbidden-target", "target_modules"),
        ({"r": 1024}, "max-lora-rank", "r"),
        ({"rank_pattern": {"q_proj": 640}}, "max-lora-rank", "r"),
        ({"r": 0}, "rank", "r"),
        ({"target_modules": []}, "required", "target_modules"),
        ({"peft_type": "IA3"}, "peft-type", "peft_type"),
        ({"base_model_name_or_path": "Qwen/Qwen2.5-VL-7B-Instruct"}, "base-model", "base_model_name_or_path"),
    ],
)
def test_each_rule_names_itself_and_its_field(overrides: dict, rule: str, field: str) -> None:
    found = rules.config_violations(config(**overrides), base_model=BASE)
    assert [(v.rule, v.field) for v in found] == [(rule, field)], found
    assert f"adapter_config.{field}" in str(found[0]) and f"rule {rule}" in str(found[0])


@pytest.mark.parametrize("init", [True, False, "gaussian", "eva", "orthogonal", "mica", "lora_ga"])
def test_initialisations_that_leave_the_base_alone_are_servable(init) -> None:
    assert rules.config_violations(config(init_lora_weights=init)) == []


def test_classifier_heads_may_be_saved_whole() -> None:
    assert rules.config_violations(config(modules_to_save=["score"])) == []


def test_a_lower_serving_limit_is_enforced_and_the_smallest_fitting_rank_is_chosen() -> None:
    assert [v.rule for v in rules.config_violations(config(), max_lora_rank=16)] == ["max-lora-rank"]
    assert [rules.smallest_max_lora_rank(r) for r in (1, 2, 8, 24, 300, 512)] == [1, 8, 8, 32, 320, 512]


def test_a_plain_adapter_passes_with_its_facts_and_digest(tmp_path: Path) -> None:
    info = check_adapter_dir(adapter(tmp_path, r=24), base_model=BASE)
    assert (info.rank, info.max_lora_rank, info.base_model) == (24, 32, BASE)
    assert info.target_modules == ["q_proj", "v_proj"]
    assert info.sha256 == sha256_file(tmp_path / "adapter_model.safetensors")
    status = info.status()
    assert status["config"]["r"] == 24 and "use_dora" not in status["config"]  # only what is set
    assert rules.config_violations(status["config"], base_model=BASE) == []  # what the operator re-checks


def test_vision_tower_weights_are_flagged_from_the_safetensors_header(tmp_path: Path) -> None:
    tower = (*TEXT_TENSORS, "base_model.model.model.visual.blocks.0.attn.qkv.lora_A.weight")
    with pytest.raises(AdapterError) as err:
        check_adapter_dir(adapter(tmp_path, tensors=tower))
    assert [v.rule for v in err.value.violations] == ["vision-tower"]
    assert "model.visual.blocks.0.attn.qkv" in str(err.value)


def test_every_broken_rule_is_reported_at_once(tmp_path: Path) -> None:
    with pytest.raises(AdapterError) as err:
        check_adapter_dir(adapter(tmp_path, use_dora=True, r=1024), sha256="0" * 64)
    assert sorted(v.rule for v in err.value.violations) == ["dora", "max-lora-rank", "sha256"]


def test_missing_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match=r"adapter_config\.json.*adapter_model\.safetensors"):
        check_adapter_dir(tmp_path)


def test_links_are_refused_even_to_a_sound_adapter(tmp_path: Path) -> None:
    """A server reads what a link points at, as the server: a shared one would load another team's files."""
    sound = adapter(tmp_path / "other") if (tmp_path / "other").mkdir() is None else None
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "adapter_config.json").write_bytes((sound / "adapter_config.json").read_bytes())
    (linked / "adapter_model.safetensors").symlink_to(sound / "adapter_model.safetensors")
    (tmp_path / "whole").symlink_to(sound, target_is_directory=True)
    check_adapter_dir(sound)  # the files themselves pass
    for path, link in ((linked, "adapter_model.safetensors"), (tmp_path / "whole", "whole")):
        with pytest.raises(AdapterError) as err:
            check_adapter_dir(path)
        assert [v.rule for v in err.value.violations] == ["files"] and link in str(err.value)


def test_the_init_container_command_exits_3_with_one_error_line_per_rule(tmp_path: Path, capsys) -> None:
    path = adapter(tmp_path / "a", use_dora=True) if (tmp_path / "a").mkdir() is None else None
    code = main(["--adapter", str(path), "--base-model", "other/model", "--max-lora-rank", "32"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_BAD_INPUT
    assert [line.split("(rule ")[1].rstrip(")") for line in err] == ["dora", "base-model"]
    assert all(line.startswith(ERROR_PREFIX) for line in err)


def test_the_init_container_copies_from_a_source_then_checks(tmp_path: Path, capsys) -> None:
    source = adapter(tmp_path / "src") if (tmp_path / "src").mkdir() is None else None
    digest = sha256_file(source / "adapter_model.safetensors")
    dest = tmp_path / "served"
    code = main(["--adapter", str(dest), "--copy-from", str(source), "--base-model", BASE, "--sha256", digest])
    assert code == 0, capsys.readouterr().err
    assert (dest / "adapter_config.json").read_text() == (source / "adapter_config.json").read_text()


def test_a_link_on_a_parent_directory_is_refused_too(tmp_path: Path) -> None:
    """The last component alone is not enough: a job directory that is a link sends the server elsewhere."""
    (tmp_path / "real").mkdir()
    sound = adapter(tmp_path / "real" / "adapter") if (tmp_path / "real" / "adapter").mkdir() is None else None
    (tmp_path / "job").symlink_to(tmp_path / "real", target_is_directory=True)
    check_adapter_dir(sound)
    with pytest.raises(AdapterError) as err:
        check_adapter_dir(tmp_path / "job" / "adapter")
    assert [v.rule for v in err.value.violations] == ["files"] and "/job is a symbolic link" in str(err.value)


def test_the_report_carries_the_digest_of_every_file_config_included(tmp_path: Path) -> None:
    from mmrl_api.adapter_digest import tree_digest

    path = adapter(tmp_path / "a") if (tmp_path / "a").mkdir() is None else None
    info = check_adapter_dir(path)
    assert info.status()["digest"] == tree_digest(path) == info.digest
    (path / "adapter_config.json").write_text(json.dumps(config(lora_alpha=64)))
    assert check_adapter_dir(path).digest != info.digest
    assert check_adapter_dir(path).sha256 == info.sha256  # the weights' digest alone does not see the config


def test_an_export_is_readable_by_other_users_as_a_server_reads_it(tmp_path: Path) -> None:
    """The export's staging directory comes from mkdtemp (0700); a server runs as another user (a shared server's
    gateway as the operator image's user), so the exported directory must be world-readable."""
    from mmrl_trainer.adapter import export_adapter

    class Peft:  # what export_adapter asks of a PEFT model
        def save_pretrained(self, out: Path) -> None:
            adapter(Path(out))

    info = export_adapter(Peft(), tmp_path / "job" / "adapter", base_model=BASE)
    assert stat.S_IMODE(info.path.stat().st_mode) == 0o755
    assert all(stat.S_IMODE(p.stat().st_mode) & 0o044 == 0o044 for p in info.path.iterdir())
