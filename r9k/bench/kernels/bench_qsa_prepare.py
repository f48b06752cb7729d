"""vLLM's one-launch QSA prepare (``qsa_prepare``: q/k norm + rotary + gate, K/V write, indexer q, pooled key, raw-key
ring; from its sources, :mod:`r9k.kernels._triton.vllm_peer`) beside the same work as tp4-default runs it in
``DecodeStepModel._attn`` (``fused``) and with the op table's stock compositions (``stock``), Flash-Next TP4, MTP-3,
CUDA-graph replay over 8 input sets (notes/decode-step.md). ``python -m r9k.bench.kernels qsa_prepare``.
``stock`` is a stand-in: what vLLM runs for this work is ``qsa_prepare``, the ``vllm`` column of the same run (the
decode step's stock does not run it: its indexer rotary is 64 dims, the model's 32).
"""
from __future__ import annotations

import torch
from ...kernels import ops
from ...kernels._triton import vllm_peer
from .. import timing
from ...r9kctl.decode_step.config import get_config

COLS = ["op", "M", "stock us", "fused us", "vllm us", "vs vllm"]


def _ours(picks: dict, cfg, R: int, caches: dict, rope_attn, rope_idx, w):
    from ...r9kctl.decode_step import model as plain

    hq, hkv, D, ih, idd = cfg.attn_q_heads, cfg.attn_kv_heads, cfg.attn_head, cfg.idx_heads, cfg.idx_head
    S = cfg.spec_tokens
    k_pool, v_pool = caches["kv"][..., :D], caches["kv"][..., D:]
    pos, slots = caches["positions"], caches["slots"]
    first = pos.view(R, S)[:, 0].contiguous()
    ck = caches["ckeys"]

    def run(ix, qkv):
        M = qkv.shape[0]
        q, k, gate = picks["qk_norm_rope"](qkv, w["q_norm"], w["k_norm"], pos, rope_attn, hq, hkv, D, cfg.eps,
                                           cfg.mrope_section, True)
        plain.kv_write(k_pool, v_pool, k, qkv[:, (2 * hq + hkv) * D:], slots)
        raw_k = ix[:, ih * idd:].float().view(R, S // cfg.idx_group, cfg.idx_group, idd).mean(2)
        new_keys = raw_k.to(torch.bfloat16).reshape(-1, 1, idd)
        iq = picks["qsa_glue"](ix[:, : ih * idd].view(M, ih, idd), w["idx_q_norm"], pos, rope_idx, cfg.eps)
        kn = picks["qsa_glue"](new_keys, w["idx_k_norm"], first, rope_idx, cfg.eps)
        ck[:, ck.shape[1] - 1].copy_(kn.view(R, idd))
        return q, gate, iq

    return run


def run(bw=None, sweep=False, requests=(1, 2, 4, 8, 16), context: int = 4096):
    from ...r9kctl.decode_step.model import rope_cache

    cfg = get_config("flash-next-tp4")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    hq, hkv, D, ih, idd = cfg.attn_q_heads, cfg.attn_kv_heads, cfg.attn_head, cfg.idx_heads, cfg.idx_head
    w = {k: (torch.randn((n,), generator=gen, device="cuda") * 0.1).to(torch.bfloat16)
         for k, n in (("q_norm", D), ("k_norm", D), ("idx_q_norm", idd), ("idx_k_norm", idd))}
    rope_attn = rope_cache(context, cfg.attn_rotary, cfg.rope_theta, "cuda")
    rope_idx = rope_cache(context, cfg.idx_rotary, cfg.rope_theta, "cuda")
    rope_vllm = rope_cache(context, idd // 2, cfg.rope_theta, "cuda")  # vLLM: one table, idx_head / 2 wide
    rows = []
    for R in requests:
        M = R * cfg.spec_tokens
        caches = vllm_peer.qsa_decode_caches(R, cfg.spec_tokens, context, cfg.idx_group, idd, cfg.page, hkv, D,
                                             "cuda", gen=gen)
        sets = [(torch.randn((M, (ih + 1) * idd), generator=gen, device="cuda").to(torch.bfloat16),
                 torch.randn((M, 2 * (hq + hkv) * D), generator=gen, device="cuda").to(torch.bfloat16))
                for _ in range(8)]
        row = {"op": "attention glue + KV write (qk rope, indexer glue, key pool)", "M": M,
               "stock is": "a stand-in (the op table's compositions); vLLM runs qsa_prepare: the vllm column"}
        for label, impl in (("stock", "stock"), ("fused", "fused")):
            picks = {op: getattr(ops.get(op), impl) for op in ("qk_norm_rope", "qsa_glue")}
            row[f"{label} us"] = timing.graph_time_us(_ours(picks, cfg, R, caches, rope_attn, rope_idx, w), sets)["us"]
        row["vllm us"] = timing.graph_time_us(
            lambda ix, qkv: vllm_peer.qsa_prepare(ix, qkv, caches, rope_vllm, w["idx_q_norm"], w["idx_k_norm"],
                                                  w["q_norm"], w["k_norm"], cfg.eps, ih, cfg.idx_group), sets)["us"]
        row["vs vllm"] = row["vllm us"] / row["fused us"]
        rows.append(row)
        print(row, flush=True)
    return rows
