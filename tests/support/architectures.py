"""A Qwen3-VL `config.json` (as a dict) written from an Architecture, for tests that need a model's config."""

from __future__ import annotations

from mmrl_api.architecture import Architecture


def hf_config(a: Architecture) -> dict:
    v = a.vision
    assert v is not None
    return {
        "tie_word_embeddings": a.tied_embeddings,
        "text_config": {
            "hidden_size": a.hidden,
            "intermediate_size": a.intermediate,
            "num_hidden_layers": a.layers,
            "num_attention_heads": a.heads,
            "num_key_value_heads": a.kv_heads,
            "head_dim": a.head_dim,
            "vocab_size": a.vocab,
            "max_position_embeddings": a.max_positions,
            "tie_word_embeddings": a.tied_embeddings,
        },
        "vision_config": {
            "depth": v.depth,
            "hidden_size": v.hidden,
            "intermediate_size": v.intermediate,
            "out_hidden_size": v.out_hidden,
            "num_position_embeddings": v.position_embeddings,
            "deepstack_visual_indexes": list(range(v.deepstack_layers)),
        },
    }
