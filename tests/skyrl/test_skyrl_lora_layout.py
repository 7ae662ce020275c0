"""The LoRA adapter as SkyRL writes it, checked by our adapter rules and exported by our SkyRL backend.

SkyRL builds the policy's PEFT model in HFModelWrapper (from our overrides' rank, alpha, targets and the vision-tower
exclusion) and saves it with FSDPStrategy._save_lora_adapters, which its FSDPStrategy.save_checkpoint calls for every
LoRA checkpoint (skyrl/backends/skyrl_train/distributed/fsdp_strategy.py). Both run here on CPU on the tiny Qwen3-VL,
without FSDP sharding (one process, a gloo group of one): the tensor names come from the same
layered_summon_lora_params walk, and FSDP2 keeps module names. save_checkpoint runs whole (its last line,
torch.cuda.synchronize, is a no-op without CUDA), so the step's shard files and fsdp_config.json are SkyRL's own, and
our resume checks (mmrl_trainer.world_size) read the world size from them.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmrl_api import adapter_rules
from mmrl_trainer.adapter import check_adapter_dir
from mmrl_trainer.backends.skyrl import export_final_adapter
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.world_size import FSDP_CONFIG, SavedCheckpoint, checkpoint_to_resume
from tests.support.skyrl import last_json, run_skyrl
from tests.unit.trainer.test_skyrl_overrides import reference_overrides

_SAVE = r"""
import json, sys, types
# model_wrapper imports flash-attn's padding helpers (a CUDA-only wheel) at module level; saving never pads.
bert_padding = types.ModuleType("flash_attn.bert_padding")
bert_padding.pad_input = bert_padding.unpad_input = None
sys.modules["flash_attn"] = types.ModuleType("flash_attn")
sys.modules["flash_attn.bert_padding"] = bert_padding

import torch
import torch.distributed as dist
from transformers import Qwen3VLForConditionalGeneration
from skyrl.backends.skyrl_train.distributed.fsdp_strategy import FSDPStrategy
from skyrl.backends.skyrl_train.workers.model_wrapper import HFModelWrapper
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
from mmrl_trainer.tiny import build_config, build_tokenizer

model_dir, ckpt_dir, step = sys.argv[1:4]
cfg = build_skyrl_config(json.load(sys.stdin))
torch.manual_seed(0)
Qwen3VLForConditionalGeneration(build_config(build_tokenizer())).save_pretrained(model_dir)

dist.init_process_group("gloo", init_method=f"file://{ckpt_dir}.pg", rank=0, world_size=1)
lora = cfg.trainer.policy.model.lora
# As FSDPPolicyWorkerBase.init_model builds it (skyrl/backends/skyrl_train/workers/fsdp/fsdp_worker.py), minus GPU-only
# options: fp32 weights and SDPA attention instead of bf16 and flash-attn.
wrapped = HFModelWrapper(
    model_dir, use_flash_attention_2=False, bf16=False, lora_rank=lora.rank, lora_alpha=lora.alpha,
    lora_dropout=lora.dropout, lora_init_method=lora.init_method, target_modules=lora.target_modules,
    exclude_modules=lora.exclude_modules,
)
strategy = FSDPStrategy(cfg.trainer.policy.fsdp_config, cfg.trainer.policy.optimizer_config,
                        cfg.trainer.policy.model)
assert strategy.is_lora
strategy.setup_distributed()  # as the worker does: the world size is the process group's
# RayPPOTrainer.save_checkpoints: global_step_N/policy, then the marker file, last. save_checkpoint's one GPU-only
# call is its closing torch.cuda.synchronize(); with no CUDA there is nothing to wait for.
torch.cuda.synchronize = lambda *args, **kwargs: None
optimizer = torch.optim.AdamW([p for p in wrapped.model.parameters() if p.requires_grad], lr=1e-4)
strategy.save_checkpoint(wrapped, f"{ckpt_dir}/global_step_{step}/policy", node_local_rank=0, optimizer=optimizer)
with open(f"{ckpt_dir}/latest_ckpt_global_step.txt", "w") as f:
    f.write(step)
dist.destroy_process_group()
print(json.dumps({"rank": lora.rank, "targets": sorted(lora.target_modules), "exclude": lora.exclude_modules}))
"""


def test_skyrl_saved_checkpoint_has_the_world_size_we_read_and_an_adapter_passing_our_rules(tmp_path: Path) -> None:
    model_dir, ckpt_dir = tmp_path / "tiny-qwen3-vl", tmp_path / "ckpt"
    _, cfg = reference_overrides()
    cfg = cfg.model_copy(
        update={
            "model": cfg.model.model_copy(update={"name": str(model_dir)}),
            "checkpoint": cfg.checkpoint.model_copy(update={"dir": str(ckpt_dir)}),
            "export_dir": str(tmp_path / "adapter"),
        }
    )
    overrides = skyrl_overrides(cfg, train_files=["/data/train.parquet"], val_files=[])
    saved = last_json(run_skyrl(_SAVE, str(model_dir), str(ckpt_dir), "3", stdin=json.dumps(overrides)))
    assert saved["rank"] == cfg.lora.rank and saved["targets"] == sorted(cfg.lora.target_modules)

    written = ckpt_dir / "global_step_3" / "policy" / "lora_adapter"
    names = adapter_rules.safetensors_names(written / "adapter_model.safetensors")
    assert names and all(".lora_A.weight" in n or ".lora_B.weight" in n for n in names), names[:4]
    assert all(n.startswith("base_model.model.model.language_model.layers.") for n in names), names[:4]
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names} == set(cfg.lora.target_modules)
    raw = check_adapter_dir(written, base_model=str(model_dir))  # SkyRL's own files, as it wrote them
    assert (raw.rank, raw.alpha, sorted(raw.target_modules)) == (cfg.lora.rank, cfg.lora.alpha, saved["targets"])

    policy = ckpt_dir / "global_step_3" / "policy"
    assert {f.name for f in policy.glob("*_world_size_*")} == {
        f"{kind}_world_size_1_rank_0.pt" for kind in ("model", "optim", "extra_state")
    }
    assert json.loads((policy / FSDP_CONFIG).read_text()) == {"fsdp_strategy": "fsdp", "world_size": 1}
    assert checkpoint_to_resume(str(ckpt_dir)) == SavedCheckpoint(3, str(ckpt_dir / "global_step_3"), 1)
    (policy / FSDP_CONFIG).unlink()  # an older save without the record: the shard names say the same
    assert checkpoint_to_resume(str(ckpt_dir)) == SavedCheckpoint(3, str(ckpt_dir / "global_step_3"), 1)

    exported, served_at, step = export_final_adapter(cfg)
    assert exported == tmp_path / "adapter" and served_at == str(exported)
    assert step == 3  # the step SkyRL saved at: reported as the adapter's lineage
    info = check_adapter_dir(exported, base_model=cfg.model.name)
    assert info.rank == cfg.lora.rank and info.max_lora_rank == adapter_rules.smallest_max_lora_rank(cfg.lora.rank)
    assert json.loads((exported / "adapter_config.json").read_text())["base_model_name_or_path"] == cfg.model.name
    assert adapter_rules.safetensors_names(exported / "adapter_model.safetensors") == names
