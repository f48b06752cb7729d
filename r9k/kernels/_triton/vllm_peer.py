"""vLLM's own Triton kernels for the ops this project fuses, loaded from vLLM's installed (or carried,
``R9K_VLLM_SRC``) sources for side-by-side runs: the GDN spec-decode core (flash-linear-attention's recurrent
update + gated RMS norm), Qwen4Exp's hyper-connection combine + grouped norm and input mix (its unfused path:
cuBLAS down, ``_hc_silu_kernel``, cuBLAS up, ``_hc_gate_mix``; the 1..48-row CuTe DSL kernel needs the CUTLASS
DSL, so that part is a stand-in), and the one-launch QSA prepare (timing only).

The files are executed with their ``vllm.*`` imports pointed at :mod:`._vllm_shim`, so neither vLLM's package
init nor its compiled extension is needed; only import lines are rewritten, one for one, so line numbers stay
those of vLLM's file. Nothing of vLLM is copied into this project."""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import types
from pathlib import Path
from typing import Optional

FILES = {
    "fla_gating": "vllm/third_party/flash_linear_attention/ops/fused_sigmoid_gating.py",
    "fla_norm": "vllm/third_party/flash_linear_attention/ops/layernorm_guard.py",
    "hc": "vllm/models/qwen4_exp/nvidia/ops/hc.py",
    "qsa_prepare": "vllm/models/qwen4_exp/nvidia/ops/qsa_prepare.py",
}

_IMPORT = re.compile(r"^(\s*)from (vllm\.[\w.]+|einops|\.[\w.]*) import ", re.M)


class PeerUnavailable(RuntimeError):
    """vLLM's sources are not here (or a file failed to load): the reason is the message."""


def source_root() -> Optional[Path]:
    """The folder that holds ``vllm/``: ``$R9K_VLLM_SRC``, else the installed package's parent (found
    without importing it); None when neither exists."""
    env = os.environ.get("R9K_VLLM_SRC")
    if env:
        p = Path(env)
        return p if (p / "vllm").is_dir() else None
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent


@functools.lru_cache(maxsize=None)
def load(name: str) -> types.ModuleType:
    """Execute one of :data:`FILES` from vLLM's sources (imports rewritten to the shim) and return it."""
    root = source_root()
    if root is None:
        raise PeerUnavailable("vLLM's sources not found (set R9K_VLLM_SRC to the folder holding vllm/)")
    path = root / FILES[name]
    if not path.is_file():
        raise PeerUnavailable(f"{path}: not in this vLLM's sources")
    src = _IMPORT.sub(lambda m: f"{m.group(1)}from r9k.kernels._triton._vllm_shim import ", path.read_text())
    mod = types.ModuleType(f"r9k_vllm_peer.{name}")
    mod.__file__ = str(path)
    sys.modules[mod.__name__] = mod  # dataclasses look their module up there (a private name: vLLM's untouched)
    try:
        exec(compile(src, str(path), "exec"), mod.__dict__)  # noqa: S102 - vLLM's own file, see module doc
    except Exception as exc:  # noqa: BLE001 - reported as unavailable, with the reason
        sys.modules.pop(mod.__name__, None)
        raise PeerUnavailable(f"{path}: {type(exc).__name__}: {exc}") from exc
    return mod


def available() -> tuple[bool, str]:
    """Whether every peer file loads here; the reason when not."""
    try:
        for n in FILES:
            load(n)
    except PeerUnavailable as exc:
        return False, str(exc)
    return True, str(source_root())


def gdn_core(mixed_qkv, z, b, a, A_log, dt_bias, norm_weight, state, cu_seqlens, num_accepted, state_indices,
             num_k_heads, num_v_heads, head_k_dim=128, head_v_dim=128, eps=1e-6, gate="sigmoid", scale=None,
             out=None):
    """vLLM's GDN spec-decode core as its layer runs it, with the signature of
    :func:`r9k.kernels.gdn_decode.gdn_spec_decode_core` (``state`` updated in place)."""
    fla, norm = load("fla_gating"), load("fla_norm")
    T = mixed_qkv.shape[0]
    Hk, Hv, Dk, Dv = num_k_heads, num_v_heads, head_k_dim, head_v_dim
    q = mixed_qkv[:, : Hk * Dk].view(1, T, Hk, Dk)
    k = mixed_qkv[:, Hk * Dk: 2 * Hk * Dk].view(1, T, Hk, Dk)
    v = mixed_qkv[:, 2 * Hk * Dk: 2 * Hk * Dk + Hv * Dv].view(1, T, Hv, Dv)
    o, _ = fla.fused_sigmoid_gating_delta_rule_update(
        A_log=A_log, a=a, b=b, dt_bias=dt_bias, q=q, k=k, v=v, scale=scale, initial_state=state,
        inplace_final_state=True, cu_seqlens=cu_seqlens, ssm_state_indices=state_indices,
        num_accepted_tokens=num_accepted, use_qk_l2norm_in_kernel=True)
    y = norm.rmsnorm_fn(o.reshape(-1, Dv), norm_weight, None, z=z.reshape(-1, Dv), eps=eps, group_size=None,
                        norm_before_gate=True, activation=gate)
    y = y.view(T, Hv * Dv)
    return out.copy_(y) if out is not None else y


def gdn_split(mixed_qkv, z, b, a, num_k_heads, num_v_heads, head_k_dim=128, head_v_dim=128):
    """The contiguous q, k, v [1, T, H, D], a, b [T, Hv] and z [T*Hv, Dv] vLLM's layer hands its two GDN
    kernels (its wrapper's copies, made once): for timing the two launches alone."""
    T = mixed_qkv.shape[0]
    Hk, Hv, Dk, Dv = num_k_heads, num_v_heads, head_k_dim, head_v_dim
    q = mixed_qkv[:, : Hk * Dk].reshape(1, T, Hk, Dk).contiguous()
    k = mixed_qkv[:, Hk * Dk: 2 * Hk * Dk].reshape(1, T, Hk, Dk).contiguous()
    v = mixed_qkv[:, 2 * Hk * Dk: 2 * Hk * Dk + Hv * Dv].reshape(1, T, Hv, Dv).contiguous()
    return q, k, v, a.contiguous(), b.contiguous(), z.reshape(-1, Dv).contiguous()


def gdn_two_launches(q, k, v, a, b, z2, A_log, dt_bias, norm_weight, state, cu_seqlens, num_accepted,
                     state_indices, eps=1e-6, gate="sigmoid"):
    """vLLM's recurrent kernel + gated norm on inputs already contiguous (:func:`gdn_split`): exactly two launches."""
    fla, norm = load("fla_gating"), load("fla_norm")
    o, _ = fla.fused_sigmoid_gating_delta_rule_update(
        A_log=A_log, a=a, b=b, dt_bias=dt_bias, q=q, k=k, v=v, initial_state=state, inplace_final_state=True,
        cu_seqlens=cu_seqlens, ssm_state_indices=state_indices, num_accepted_tokens=num_accepted,
        use_qk_l2norm_in_kernel=True)
    return norm.rmsnorm_fn(o.reshape(-1, v.shape[-1]), norm_weight, None, z=z2, eps=eps, group_size=None,
                           norm_before_gate=True, activation=gate)


def hc_mix(xn, w_down, w_up, out_buf=None, out_block=None, *, lora_rank: int = 320, hc_count: int = 4):
    """vLLM's Qwen4Exp hyper-connection input mix on its unfused path (four launches), with the signature of
    :func:`r9k.kernels.hc_mix.reference.hc_mix`; the SiLU is written into ``buf``'s lora columns (no copy added)."""
    import torch.nn.functional as F

    m = load("hc")
    buf = F.linear(xn, w_down)
    if out_buf is not None:
        out_buf.copy_(buf)
        buf = out_buf
    lora = buf[:, :lora_rank]
    m._hc_silu_kernel[(buf.shape[0],)](lora, lora, buf.stride(0), buf.stride(0), DIM=lora_rank, HC=hc_count,
                                       launch_pdl=m.current_platform.is_arch_support_pdl())
    gate = F.linear(lora, w_up)
    block = m._hc_gate_mix(xn, gate, hc_count)
    if out_block is not None:
        out_block.copy_(block)
        block = out_block
    return buf, block


def hc_combine_norm(res, blk, inj, weight, eps, hc):
    """vLLM's Qwen4Exp combine + grouped Gemma norm: ``(new residual, normed)``; ``blk is None``: the
    grouped norm alone."""
    m = load("hc")
    if blk is None:
        return res, m._grouped_gemma_rmsnorm(res, weight, eps, hc)
    return m._hc_combine_norm(res, blk, inj, weight, eps, hc)


def qsa_decode_caches(requests: int, spec: int, context: int, group: int, idx_head: int, page: int, kv_heads: int,
                      head_dim: int, device, ring: int = 4, gen=None) -> dict:
    """vLLM's caches and metadata for a uniform decode batch (``requests`` x ``spec`` new tokens at
    positions ``context - spec .. context - 1``, one completed indexer group a request), as its QSA metadata
    builders hand them to ``qsa_prepare``."""
    import torch

    R, S = requests, spec
    T, G, pages = R * S, context // group, -(-context // page)
    r = torch.arange(R, device=device)
    pos = (context - S + torch.arange(S, device=device))[None, :].expand(R, S).reshape(-1)
    tok_req = r.repeat_interleave(S)
    bf = dict(dtype=torch.bfloat16, device=device)
    rnd = (lambda shape: torch.randn(shape, generator=gen, device=device).to(torch.bfloat16))
    boundary = (pos % group) == group - 1
    return dict(
        kv=rnd((R * pages, page, kv_heads, 2 * head_dim)), ring=torch.zeros((R, ring, idx_head), **bf),
        ckeys=rnd((R, G, idx_head)), positions=pos.contiguous(),
        slots=(tok_req * pages * page + pos).contiguous(),
        state_slots=(tok_req * ring + pos % ring).contiguous(),
        state_table=r.to(torch.int32)[:, None].contiguous(),
        query_start_loc=(torch.arange(R + 1, device=device) * S).to(torch.int32),
        logical=pos.contiguous(),
        comp_slots=torch.where(boundary, tok_req * G + pos // group, torch.full_like(pos, -1)).contiguous(),
        k_work=torch.stack([r, torch.zeros_like(r)], 1).to(torch.int32).contiguous())


def qsa_prepare(ix, qkv, caches: dict, cos_sin, idx_q_norm, idx_k_norm, q_norm, k_norm, eps, idx_heads: int,
                group: int):
    """vLLM's one-launch QSA prepare on the batch of :func:`qsa_decode_caches`: ``(q [T, hq, D],
    gate [T, hq, D], indexer q [T, idx_heads, idx_head])``. ``ix`` [T, (idx_heads + 1) * idx_head] (indexer q
    heads, then the raw key), ``qkv`` [T, 2 (hq + hkv) D]; ``cos_sin`` [positions, idx_head / 2]."""
    import torch

    m = load("qsa_prepare")
    T, idd = ix.shape[0], ix.shape[1] // (idx_heads + 1)
    q_out = torch.empty((T, idx_heads, idd), dtype=torch.bfloat16, device=ix.device)
    c = caches
    mq, mg = m.qsa_prepare(
        ix[:, : idx_heads * idd], ix[:, idx_heads * idd:], c["positions"], cos_sin, idx_q_norm, idx_k_norm, eps,
        q_out, c["ring"], c["state_slots"], c["state_table"], c["query_start_loc"], c["logical"], c["ckeys"],
        c["comp_slots"], c["k_work"], compress_ratio=group, mrope_section=None, rope_pos_offset=None,
        main_qkv=qkv, main_q_norm_weight=q_norm, main_k_norm_weight=k_norm, main_eps=eps, main_kv_cache=c["kv"],
        main_slot_mapping=c["slots"], main_k_scale=1.0, main_v_scale=1.0)
    return mq, mg, q_out
