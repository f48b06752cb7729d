"""The tiny Flash-Next checkpoint (``r9k-tiny:flash-next``): transformers' own ``Qwen4ExpForCausalLM`` with
random weights from a seed, saved as a checkpoint (the real checkpoint's weight names and config fields).

The layer pattern is the real model's in miniature: ``3 x GDN, 1 x QSA`` (``12 x (3, 1)`` in the real one),
4 hyper-connection streams, top-2 of 8 experts with the sigmoid-gated shared expert. All weights are bf16: the
real checkpoint's block-fp8 linears and MXFP4 experts have no kernels on vLLM's CPU backend (the shared
expert's bf16 weights are snapped onto the MXFP4 grid, as in the other tiny models, so this project's shared
expert kernel computes exactly what the checkpoint holds). The indexer budget (512 tokens) bounds the
served context: see :func:`r9k.plugin.models.flash_next.check_config`.
"""
from __future__ import annotations

from pathlib import Path

#: keyword arguments of transformers' Qwen4ExpTextConfig
CONFIG: dict = {
    "vocab_size": 512,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "indexed_attention"],
    # QSA: gated attention, 4 query heads (+ their gates) and 2 KV heads of 64, rope on a quarter of each head
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                        "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 64,
    "indexer_budget": 512, "indexer_compress_ratio": 4,
    # Gated DeltaNet: 2 key heads and 4 value heads of 64, conv width 4, sigmoid output gate
    "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 64, "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4,
    "output_gate_type": "sigmoid",
    # MoE
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128, "norm_topk_prob": True,
    # hyper-connections: 4 streams, low rank 32 (the real model: 320)
    "hc_count": 4, "hc_lowrank": 32,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "initializer_range": 0.08,
    "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
}


NORM_STD = 0.2  # spread added to the norm weights (see build)


def build(out: Path, seed: int, shape_weights, write_tokenizer) -> None:
    """Write the checkpoint into ``out`` (an empty directory). ``shape_weights`` and ``write_tokenizer`` are
    the recipe edits and the tokenizer every tiny model shares (``r9k.plugin.tiny_model``)."""
    import torch
    from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig

    write_tokenizer(out, CONFIG["vocab_size"], CONFIG["max_position_embeddings"])
    config = Qwen4ExpTextConfig(**CONFIG)
    config.architectures = ["Qwen4ExpForCausalLM"]
    torch.manual_seed(seed)
    model = Qwen4ExpForCausalLM(config).to(torch.bfloat16)
    # transformers initialises every norm weight to a constant (0 for the Gemma "1 + w" norms, 1 for the GDN
    # gated norm): random ones instead, so that a served model that ignored a norm weight would show it
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "layernorm.weight")):
                p.add_((torch.randn(p.shape, generator=gen) * NORM_STD).to(p.dtype))
    model.load_state_dict(shape_weights({k: v.detach().clone() for k, v in model.state_dict().items()}))
    # save_pretrained, not the state dict: transformers writes the checkpoint layout (one tensor per expert)
    model.save_pretrained(str(out))
