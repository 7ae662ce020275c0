"""mmrl trainer: GRPO + LoRA post-training of vision-language models (SkyRL on clusters, TRL locally)."""
