"""Builds the tiny model that the ``cpu-smoke`` profile serves: no download, no GPU.

A Qwen2-MoE-architecture checkpoint (so it has an MoE router, ``mlp.gate``, which vLLM builds as a
``GateLinear``, and a sigmoid-gated shared expert) with random weights from a fixed seed, and a
byte-level BPE tokenizer trained with ``tokenizers`` on a few sentences. Both are written once into
the user's cache directory and reused; the directory name carries a hash of the recipe, so a change
of the recipe builds a new one instead of serving a stale one.

Usage: ``python -m r9k.plugin.tiny_model`` prints the path (building it first if needed). The
``cpu-smoke`` profile names the model as ``r9k-tiny:qwen2-moe`` (its ``model_path``); ``r9kctl launch`` (or the test)
turns that into the path with :func:`ensure_tiny_model`.

Heavy imports (torch, transformers, tokenizers) happen only inside :func:`build`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from r9k.registry import envvars

#: The model reference used in profiles; resolved to a local path by :func:`resolve_model_ref`.
MODEL_REF = "r9k-tiny:qwen2-moe"

# The recipe. head_dim = hidden_size / num_attention_heads = 64: vLLM's CPU attention wants >= 64.
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
    "decoder_sparse_step": 1,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128,
    "num_experts_per_tok": 2,
    "num_experts": 8,
    "norm_topk_prob": True,
    "mlp_only_layers": [],
    "qkv_bias": True,
    "use_sliding_window": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
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


def recipe_hash() -> str:
    blob = json.dumps({"config": CONFIG, "seed": SEED, "std": INIT_STD, "corpus": CORPUS,
                       "special": SPECIAL_TOKENS, "v": 1}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def model_dir() -> Path:
    return envvars.cache_dir() / "models" / f"tiny-qwen2-moe-{recipe_hash()}"


def _complete(path: Path) -> bool:
    return all((path / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json",
                                                "tokenizer_config.json"))


def build(out: Path) -> None:
    """Write config, random weights and a trained tokenizer into ``out`` (an empty directory)."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # Tokenizer: byte-level BPE, so any text encodes; vocab capped by the model's vocab size.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=CONFIG["vocab_size"], special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    assert tok.get_vocab_size() <= CONFIG["vocab_size"]
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
        "model_max_length": CONFIG["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }, indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, indent=1))
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1))

    # Weights: names as in transformers' Qwen2MoeForCausalLM checkpoints (what vLLM loads).
    c = CONFIG
    gen = torch.Generator().manual_seed(SEED)
    h, e, mi, si = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"], \
        c["shared_expert_intermediate_size"]
    hd = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd

    def rnd(*shape):
        return (torch.randn(*shape, generator=gen) * INIT_STD).to(torch.bfloat16)

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
               # The router: scaled up so that its top-2 choice is clear (not a near-tie).
               f"{p}.mlp.gate.weight": rnd(e, h) * 4,
               f"{p}.mlp.shared_expert_gate.weight": rnd(1, h),
               f"{p}.mlp.shared_expert.gate_proj.weight": rnd(si, h),
               f"{p}.mlp.shared_expert.up_proj.weight": rnd(si, h),
               f"{p}.mlp.shared_expert.down_proj.weight": rnd(h, si)}
        for x in range(e):
            q = f"{p}.mlp.experts.{x}"
            sd |= {f"{q}.gate_proj.weight": rnd(mi, h), f"{q}.up_proj.weight": rnd(mi, h),
                   f"{q}.down_proj.weight": rnd(h, mi)}
    save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "r9k-recipe.json").write_text(json.dumps({"recipe_hash": recipe_hash(), "seed": SEED}))


def ensure_tiny_model() -> Path:
    """Path of the tiny model, building it on first use (atomic: a temp dir renamed into place)."""
    target = model_dir()
    if _complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        build(tmp)
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
    """Turns the profile's model reference into something ``vllm serve`` accepts."""
    return str(ensure_tiny_model()) if model == MODEL_REF else model


if __name__ == "__main__":
    print(ensure_tiny_model())
    sys.exit(0)
