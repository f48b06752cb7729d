"""The tiny Flash-Next checkpoint (``r9k-tiny:flash-next``): transformers' own ``Qwen4ExpForCausalLM`` with
seeded random weights, saved with the real checkpoint's weight names and config fields.

The real model's layer pattern in miniature (``3 x GDN, 1 x QSA``), 4 hyper-connection streams, top-2 of 8
experts with the shared expert. The dense linears the real checkpoint stores as block-fp8 are stored so here too
(:func:`to_block_fp8`); every other weight is bf16 (the shared expert's on the MXFP4 grid). The indexer budget
is 32 tokens, so that a test prompt exceeds it and the QSA selection changes what each query attends to.
"""
from __future__ import annotations

from pathlib import Path
from ...registry import fileio
from ..quant import FP8_CHECKPOINT_LINEARS, quantize_block_fp8

#: keyword arguments of transformers' Qwen4ExpTextConfig
CONFIG: dict = {
    "vocab_size": 512,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "indexed_attention"],
    # QSA: gated attention, 4 query heads (+ their gates) and 4 KV heads of 64, rope on a quarter of each head.
    # Head counts such that every block-fp8 shard is whole 128-row blocks at TP 2 too (k: 4 x 64 = 256 rows)
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                        "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 64,
    # a budget of 32 tokens (8 groups of 4): the tests' longer prompts exceed it, so the selection runs
    "indexer_budget": 32, "indexer_compress_ratio": 4,
    # Gated DeltaNet: 4 key heads and 4 value heads of 64 (q, k, v, z: 256 rows each), conv width 4, sigmoid
    # output gate
    "linear_num_key_heads": 4, "linear_num_value_heads": 4,
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
    to_block_fp8(out)


#: the checkpoint's quantization_config (the real checkpoint's block-fp8 format)
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": [128, 128]}


def to_block_fp8(out: Path) -> None:
    """Rewrite the saved checkpoint's block-fp8 linears (:data:`r9k.plugin.quant.FP8_CHECKPOINT_LINEARS`) as
    e4m3 + per-128x128-block fp32 scales, and add :data:`QUANTIZATION_CONFIG` to its config.json."""
    import json

    from safetensors.torch import load_file, save_file

    files = sorted(out.glob("*.safetensors"))
    for f in files:
        sd = load_file(str(f))
        for k in list(sd):
            base = k[: -len(".weight")] if k.endswith(".weight") else None
            if base and base.startswith("model.layers.") and base.rsplit(".", 1)[-1] in FP8_CHECKPOINT_LINEARS:
                sd[k], sd[base + ".weight_scale_inv"] = quantize_block_fp8(sd[k])
        save_file({k: v.contiguous() for k, v in sd.items()}, str(f), metadata={"format": "pt"})
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"] = dict(QUANTIZATION_CONFIG)
    fileio.atomic_write(cfg_path, json.dumps(cfg, indent=2, sort_keys=True), "model config")


def dequantized_reference(model_dir: str):
    """transformers' own ``Qwen4ExpForCausalLM`` (bf16, eval) on a block-fp8 checkpoint, its fp8 linears
    dequantized as vLLM's stock path does (transformers' fp8 loader needs a GPU): the e2e test's reference."""
    import json

    import torch
    from safetensors.torch import load_file
    from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig

    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("quantization_config", None)
    config = Qwen4ExpTextConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    config.architectures = ["Qwen4ExpForCausalLM"]
    model = Qwen4ExpForCausalLM(config).to(torch.bfloat16).eval()
    sd: dict = {}
    for f in sorted(d.glob("*.safetensors")):
        sd.update(load_file(str(f)))
    for k in [k for k in sd if k.endswith(".weight_scale_inv")]:
        w = k[: -len("_scale_inv")]
        q, s = sd[w], sd.pop(k)
        n, kk = q.shape
        sd[w] = (q.float() * s.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :kk]).to(torch.bfloat16)
    _fuse_experts(sd, set(model.state_dict()))
    model.load_state_dict(sd, strict=True)
    return model


def _fuse_experts(sd: dict, expected: set[str]) -> None:
    """Stack the checkpoint's per-expert ``gate_proj``/``up_proj``/``down_proj`` in place where the model has
    transformers 5's stacked ``gate_up_proj`` ``[E, 2I, H]`` (gate rows first) and ``down_proj`` ``[E, H, I]``."""
    import re

    import torch

    per_expert = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
    groups: dict[str, dict[int, dict[str, object]]] = {}
    for k in list(sd):
        m = per_expert.match(k)
        if m and m.group(1) + ".gate_up_proj" in expected:
            groups.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = sd.pop(k)
    for prefix, experts in groups.items():
        order = sorted(experts)
        if order != list(range(len(order))):
            raise ValueError(f"{prefix}: experts {order} are not 0..{len(order) - 1}")
        sd[prefix + ".gate_up_proj"] = torch.stack(
            [torch.cat([experts[e]["gate_proj"], experts[e]["up_proj"]], dim=0) for e in order])
        sd[prefix + ".down_proj"] = torch.stack([experts[e]["down_proj"] for e in order])
