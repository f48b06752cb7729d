"""Builds the tiny models that the ``cpu-*`` (and ``gpu-qwen2-moe``) profiles serve: no download.

Referenced in profiles as ``r9k-tiny:<name>`` (:data:`BUILDERS`): ``qwen2-moe`` (hidden 128, 2 layers),
``qwen2-moe-h200`` (Qwen1.5-MoE-A2.7B's layer dimensions, 8 layers, drawn on the GPU when there is one),
``qwen3-next`` and ``flash-next`` (transformers' own classes, seeded random init). The router weights are
scaled x4 so top-2 choices are not near-ties, and the shared expert's weights are rounded onto the MXFP4 grid
(exact in bf16), so that the shared-expert adapter's conversion is lossless. The tokenizer is byte-level BPE
trained on :data:`CORPUS`. Each model is built once into the cache, in a folder named by a hash of its recipe.

Usage: ``python -m r9k.plugin.tiny_model [name]`` prints the path (building it first if needed);
:func:`resolve_model_ref` turns a reference into the path. Torch, transformers, tokenizers load only in builders.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from ..registry import envvars
from .models import tiny_flash_next

PREFIX = "r9k-tiny:"

# The sparse MoE block both tiny recipes share: 8 experts of width 64, 2 a token, one shared expert of 128.
TINY_MOE: dict = {
    "decoder_sparse_step": 1,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128,
    "num_experts_per_tok": 2,
    "num_experts": 8,
    "norm_topk_prob": True,
}

# Recipe of ``qwen2-moe``. head_dim = hidden_size / num_attention_heads = 64.
CONFIG: dict = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    **TINY_MOE,
    "mlp_only_layers": [],
    "qkv_bias": True,
    "use_sliding_window": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}

# Recipe of ``qwen2-moe-h200``: Qwen1.5-MoE-A2.7B's layer (its config.json), 8 of its 24 layers.
H200_QWEN2_MOE: dict = dict(CONFIG, vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                            num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=8192,
                            moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts_per_tok=4,
                            num_experts=60, norm_topk_prob=False)

# Recipe of ``qwen3-next``: keyword arguments of transformers' Qwen3NextConfig.
QWEN3_NEXT_CONFIG: dict = {
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    # gated full attention: 4 query heads (+ 4 gate heads) and 2 KV heads of 64
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "partial_rotary_factor": 0.25,
    # Gated DeltaNet: 2 key heads and 4 value heads of 64, conv width 4
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    **TINY_MOE,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.08,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}

SEED = 1234
# Weights drawn N(0, INIT_STD); large enough that greedy decoding is not a sea of near-ties.
INIT_STD = 0.08

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A router picks two experts for every token, and a shared expert sees them all.",
    "Kernels are checked against a stock reference before they are switched on.",
    "The server reports which implementation it uses for each variant.",
    "Once upon a time there was a tiny model that ran on a laptop without a GPU.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16.",
    "Hello world! How are you today? I am fine, thank you.",
    "The capital of France is Paris; the capital of Italy is Rome.",
]
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]  # ids 0, 1, 2 (match bos/eos above)
RECIPE_VERSION = 2  # 2: shared-expert weights on the MXFP4 grid; qwen3-next added


def recipe_hash(name: str = "qwen2-moe") -> str:
    config = {"qwen2-moe": CONFIG, "qwen2-moe-h200": H200_QWEN2_MOE, "qwen3-next": QWEN3_NEXT_CONFIG,
              "flash-next": dict(tiny_flash_next.CONFIG, norm_std=tiny_flash_next.NORM_STD,
                                 quantization_config=tiny_flash_next.QUANTIZATION_CONFIG)}[name]
    blob = json.dumps({"name": name, "config": config, "seed": SEED, "std": INIT_STD, "corpus": CORPUS,
                       "special": SPECIAL_TOKENS, "v": RECIPE_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def model_dir(name: str = "qwen2-moe") -> Path:
    return envvars.cache_dir() / "models" / f"tiny-{name}-{recipe_hash(name)}"


def _complete(path: Path) -> bool:
    return all((path / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json",
                                                "tokenizer_config.json"))


def _write_tokenizer(out: Path, vocab_size: int, max_len: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # Byte-level BPE, so any text encodes; vocab capped by the model's vocab size.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    assert tok.get_vocab_size() <= vocab_size
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
        "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
    }, indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, indent=1))


def mxfp4_snap(w):
    """``w`` rounded onto the MXFP4 grid (per 32 values along the last dim), returned as bf16 (exact)."""
    import torch

    from ..kernels.shared_expert.reference import dequant_mxfp4, quantize_mxfp4

    return dequant_mxfp4(*quantize_mxfp4(w.float())).to(torch.bfloat16)


def _shape_weights(sd: dict) -> dict:
    """The two recipe edits both models get: router x4, shared expert on the MXFP4 grid."""
    for k in list(sd):
        if k.endswith(".mlp.gate.weight"):
            sd[k] = (sd[k].float() * 4).to(sd[k].dtype)
        elif ".mlp.shared_expert." in k and k.endswith("_proj.weight"):
            sd[k] = mxfp4_snap(sd[k])
    return sd


def build_qwen2_moe(out: Path, c: dict = CONFIG, device: str = "cpu") -> None:
    """Write config ``c``, random weights (drawn on ``device``) and a trained tokenizer into ``out`` (empty)."""
    import torch
    from safetensors.torch import save_file

    _write_tokenizer(out, c["vocab_size"], c["max_position_embeddings"])
    (out / "config.json").write_text(json.dumps(c, indent=1))

    # Weights: names as in transformers' Qwen2MoeForCausalLM checkpoints (what vLLM loads).
    gen = torch.Generator(device=device).manual_seed(SEED)
    h, e, mi, si = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"], \
        c["shared_expert_intermediate_size"]
    hd = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    # the realistic width: N(0, 1/sqrt(fan-in)) keeps the activations of 2048-wide layers O(1); the tiny one
    # keeps its INIT_STD (its recipe hash and its tests' figures)
    std = INIT_STD if c is CONFIG else h ** -0.5

    def rnd(*shape):
        return (torch.randn(*shape, generator=gen, device=device) * std).to(torch.bfloat16).cpu()

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    sd = {"model.embed_tokens.weight": rnd(c["vocab_size"], h),
          "model.norm.weight": ones(h),
          "lm_head.weight": rnd(c["vocab_size"], h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        sd |= {f"{p}.input_layernorm.weight": ones(h),
               f"{p}.post_attention_layernorm.weight": ones(h),
               f"{p}.self_attn.q_proj.weight": rnd(h, h), f"{p}.self_attn.q_proj.bias": rnd(h),
               f"{p}.self_attn.k_proj.weight": rnd(kv, h), f"{p}.self_attn.k_proj.bias": rnd(kv),
               f"{p}.self_attn.v_proj.weight": rnd(kv, h), f"{p}.self_attn.v_proj.bias": rnd(kv),
               f"{p}.self_attn.o_proj.weight": rnd(h, h),
               f"{p}.mlp.gate.weight": rnd(e, h),
               f"{p}.mlp.shared_expert_gate.weight": rnd(1, h),
               f"{p}.mlp.shared_expert.gate_proj.weight": rnd(si, h),
               f"{p}.mlp.shared_expert.up_proj.weight": rnd(si, h),
               f"{p}.mlp.shared_expert.down_proj.weight": rnd(h, si)}
        for x in range(e):
            q = f"{p}.mlp.experts.{x}"
            sd |= {f"{q}.gate_proj.weight": rnd(mi, h), f"{q}.up_proj.weight": rnd(mi, h),
                   f"{q}.down_proj.weight": rnd(h, mi)}
    sd = _shape_weights(sd)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})


def build_qwen3_next(out: Path) -> None:
    """transformers' own Qwen3-Next classes with random weights (seeded), saved as a checkpoint."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    c = QWEN3_NEXT_CONFIG
    _write_tokenizer(out, c["vocab_size"], c["max_position_embeddings"])
    config = Qwen3NextConfig(**c)
    config.architectures = ["Qwen3NextForCausalLM"]
    torch.manual_seed(SEED)
    model = Qwen3NextForCausalLM(config).to(torch.bfloat16)
    sd = _shape_weights({k: v.detach().clone() for k, v in model.state_dict().items()})
    config.save_pretrained(str(out))
    save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})


def build_flash_next(out: Path) -> None:
    """transformers' own Qwen4Exp (Flash-Next) classes with random weights (seeded), saved as a checkpoint."""
    tiny_flash_next.build(out, SEED, _shape_weights, _write_tokenizer)


def build_qwen2_moe_h200(out: Path) -> None:
    import torch

    build_qwen2_moe(out, H200_QWEN2_MOE, "cuda" if torch.cuda.is_available() else "cpu")


BUILDERS = {"qwen2-moe": build_qwen2_moe, "qwen2-moe-h200": build_qwen2_moe_h200, "qwen3-next": build_qwen3_next,
            "flash-next": build_flash_next}


def build(out: Path, name: str = "qwen2-moe") -> None:
    BUILDERS[name](out)
    (out / "r9k-recipe.json").write_text(json.dumps({"name": name, "recipe_hash": recipe_hash(name),
                                                      "seed": SEED}))


def ensure_tiny_model(name: str = "qwen2-moe") -> Path:
    """Path of tiny model ``name``, building it on first use (atomic: a temp dir renamed into place)."""
    if name not in BUILDERS:
        raise ValueError(f"unknown tiny model {name!r} (known: {', '.join(BUILDERS)})")
    target = model_dir(name)
    if _complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        build(tmp, name)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; use its copy if it is complete
            if not _complete(target):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model_ref(model: str) -> str:
    """Turns the profile's model reference (``r9k-tiny:<name>``) into a path ``vllm serve`` accepts."""
    if model.startswith(PREFIX):
        # resolved: one model at one place is one path, the path vLLM hashes into its compile-cache key
        return str(ensure_tiny_model(model[len(PREFIX):]).resolve())
    return model


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else "qwen2-moe"
    print(ensure_tiny_model(arg[len(PREFIX):] if arg.startswith(PREFIX) else arg))
    sys.exit(0)
