"""Fused Gated DeltaNet speculative-decode core: gating, l2-norms, the delta-rule recurrence over the
candidates, state stores and the gated RMS-norm output in one launch per layer.

Grid ``(N + 1, Hv, DV / BV)``: program (n, v, j) owns value rows j*BV .. of sequence n's head v, its state in
registers; programs (N, v, j) zero the graph-padding rows past ``cu[N]``. The norm couples a head's rows: with
BV < DV the last block of a (sequence, head) to arrive (acq_rel counter) norms the head in place (no block
waits). A sequence's candidate rows are loaded up front with the state; ``o = d (H q) + u (k . q)`` keeps the
state update off the reduction chain. fp32 as stock, roundings on the bits: only the summation order differs."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton.common import rne_bf16
from .._triton.counters import arrival_counters
from .._triton.pdl import gdc_launch_dependents, gdc_wait, pdl_enabled


@triton.jit
def _pick(tile, rows, i):
    return tl.sum(tl.where((rows == i)[:, None], tile, 0.0), axis=0)


@triton.jit
def _norm_gate_store(O, z_ptr, s_z, w_ptr, w_ptrs, r, rm, rows, L, hv, dv, eps, DV: tl.constexpr,
                     GATE_SILU: tl.constexpr):
    """The gated RMSNorm of a (sequence, head)'s o rows and its bf16 store, rows past the
    sequence zero."""
    rr = tl.math.rsqrt(tl.sum(O * O, axis=1) / DV + eps)
    Z = tl.load(z_ptr + r[:, None] * s_z + hv * DV + dv[None, :], mask=rm[:, None], other=0.0).to(tl.float32)
    sg = 1.0 / (1.0 + tl.exp(-Z))
    if GATE_SILU:
        g = Z * sg
    else:
        g = sg
    w = tl.load(w_ptr + dv).to(tl.float32)
    Y = tl.where(rm[:, None], rne_bf16(O * rr[:, None] * w[None, :] * g), 0.0)
    tl.store(w_ptrs + dv[None, :], Y.to(tl.bfloat16), mask=(rows < L)[:, None])


@triton.jit
def _gdn_decode_kernel(qkv_ptr, z_ptr, b_ptr, a_ptr, alog_ptr, dtb_ptr, w_ptr, state_ptr, cu_ptr, acc_ptr, idx_ptr,
                       out_ptr, cnt_ptr, N, T, S, s_qkv, s_z, s_b, s_a, s_out, s_slot, s_idx, scale, eps,
                       HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr,
                       S_MAX: tl.constexpr, GATE_SILU: tl.constexpr, STATE_BF16: tl.constexpr, PDL: tl.constexpr):
    NB: tl.constexpr = DV // BV  # value-row blocks per head (programs per (sequence, head))
    n = tl.program_id(0)
    hv = tl.program_id(1)
    vb = tl.program_id(2)
    dk = tl.arange(0, DK)
    dvb = vb * BV + tl.arange(0, BV)  # this program's value rows
    dv = tl.arange(0, DV)
    rows = tl.arange(0, S_MAX)
    if PDL:
        gdc_wait()  # the conv update's output (and the state pool) are the predecessor's
    if n == N:
        # graph padding past the last sequence: zero rows cu[N] .. T-1 (this program's columns)
        tail = tl.load(cu_ptr + N)
        for base in range(tail, T, S_MAX):
            r = base + rows
            tl.store(out_ptr + r[:, None] * s_out + hv * DV + dvb[None, :], tl.zeros((S_MAX, BV), tl.bfloat16),
                     mask=(r < T)[:, None])
    else:
        start = tl.load(cu_ptr + n)
        L = tl.load(cu_ptr + n + 1) - start
        acc = tl.load(acc_ptr + n)
        slots = tl.load(idx_ptr + n * s_idx + rows, mask=rows < S, other=0)  # every candidate's slot, up front
        last = tl.sum(tl.where(rows == acc - 1, slots, 0), axis=0)
        valid = last > 0
        n_iter = tl.where(valid, L, 0)
        hk = hv // (HV // HK)
        r = start + rows
        rm = rows < n_iter
        # candidate rows, all at once
        qrow = qkv_ptr + r[:, None] * s_qkv
        Q = tl.load(qrow + hk * DK + dk[None, :], mask=rm[:, None], other=0.0).to(tl.float32)
        K = tl.load(qrow + HK * DK + hk * DK + dk[None, :], mask=rm[:, None], other=0.0).to(tl.float32)
        V = tl.load(qrow + 2 * HK * DK + hv * DV + dvb[None, :], mask=rm[:, None], other=0.0).to(tl.float32)
        bb = tl.load(b_ptr + r * s_b + hv, mask=rm, other=0.0).to(tl.float32)
        aa = tl.load(a_ptr + r * s_a + hv, mask=rm, other=0.0).to(tl.float32)
        # rows of the state of the last accepted candidate. Masks are built from full-shape integer tensors:
        # a scalar boolean mask (or `tensor & scalar_bool`) is rejected by the CPU interpreter.
        hoff = hv * DV * DK + dvb[:, None] * DK + dk[None, :]
        zero_hv = dvb[:, None] * 0 + dk[None, :] * 0
        H = tl.load(state_ptr + tl.maximum(last, 0).to(tl.int64) * s_slot + hoff, mask=(zero_hv + last) > 0,
                    other=0.0).to(tl.float32)
        # per-token gates and normalised q, k
        Qn = Q / tl.sqrt(tl.sum(Q * Q, axis=1) + 1e-6)[:, None] * scale
        Kn = K / tl.sqrt(tl.sum(K * K, axis=1) + 1e-6)[:, None]
        KQ = tl.sum(Kn * Qn, axis=1)  # k_t . q_t
        x = aa + tl.load(dtb_ptr + hv).to(tl.float32)
        sp = tl.where(x <= 20.0, tl.log(1.0 + tl.exp(x)), x)
        decay = tl.exp(-tl.exp(tl.load(alog_ptr + hv).to(tl.float32)) * sp)
        beta = 1.0 / (1.0 + tl.exp(-bb))
        O = tl.zeros((S_MAX, BV), tl.float32)
        for i in range(0, n_iter):
            sel = rows == i
            k = _pick(Kn, rows, i)
            q = _pick(Qn, rows, i)
            v = _pick(V, rows, i)
            d_i = tl.sum(tl.where(sel, decay, 0.0), axis=0)
            b_i = tl.sum(tl.where(sel, beta, 0.0), axis=0)
            kq = tl.sum(tl.where(sel, KQ, 0.0), axis=0)
            slot = tl.sum(tl.where(sel, slots, 0), axis=0)
            # H_new = d H + u k^T with u = b (v - d H k): both products of the OLD H are independent, so
            # o = H_new q = d (H q) + u (k . q) needs no reduction over the updated state.
            hk_old = tl.sum(H * k[None, :], axis=1)
            hq_old = tl.sum(H * q[None, :], axis=1)
            u = b_i * (v - d_i * hk_old)
            o = d_i * hq_old + u * kq
            H = H * d_i + u[:, None] * k[None, :]
            O = tl.where(sel[:, None], o[None, :], O)
            if STATE_BF16:
                hs = rne_bf16(H).to(tl.bfloat16)
            else:
                hs = H
            tl.store(state_ptr + tl.maximum(slot, 0).to(tl.int64) * s_slot + hoff, hs, mask=(zero_hv + slot) > 0)
        if PDL:
            # the successor may be scheduled now (it waits for this grid's completion before reading); released
            # at the start, its waiting programs took the SM slots this grid's larger batches need (measured)
            gdc_launch_dependents()
        Ob = rne_bf16(O)  # o rounded to bf16 before the norm (stock's rounding point)
        w_ptrs = out_ptr + r[:, None] * s_out + hv * DV
        if NB == 1:
            _norm_gate_store(Ob, z_ptr, s_z, w_ptr, w_ptrs, r, rm, rows, L, hv, dv, eps, DV, GATE_SILU)
        else:
            # The norm needs all DV rows: each block parks its bf16 o in the output; the last block of this
            # (sequence, head) to arrive (atomic counter, acq_rel) norms all DV columns in place and resets the
            # counter. No block waits for another, so any grid size is safe.
            tl.store(w_ptrs + dvb[None, :], Ob.to(tl.bfloat16), mask=(rows < L)[:, None])
            cnt = tl.atomic_add(cnt_ptr + n * HV + hv, 1, sem="acq_rel")
            if cnt == NB - 1:
                Of = tl.load(w_ptrs + dv[None, :], mask=rm[:, None], other=0.0, cache_modifier=".cg").to(tl.float32)
                _norm_gate_store(Of, z_ptr, s_z, w_ptr, w_ptrs, r, rm, rows, L, hv, dv, eps, DV, GATE_SILU)
                tl.store(cnt_ptr + n * HV + hv, 0)


def gdn_spec_decode_core(mixed_qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                         A_log: torch.Tensor, dt_bias: torch.Tensor, norm_weight: torch.Tensor, state: torch.Tensor,
                         cu_seqlens: torch.Tensor, num_accepted: torch.Tensor, state_indices: torch.Tensor,
                         num_k_heads: int, num_v_heads: int, head_k_dim: int = 128, head_v_dim: int = 128,
                         eps: float = 1e-6, gate: str = "sigmoid", scale: float | None = None,
                         out: torch.Tensor | None = None, num_warps: int = 4,
                         block_v: int | None = None) -> torch.Tensor:
    """Fused form of :func:`r9k.kernels.gdn_decode.reference.gdn_spec_decode_core`, one launch.

    Needs head dims powers of two, Hv % Hk == 0, the state contiguous per slot, at most 8 candidates a sequence,
    the last dims of mixed_qkv and z contiguous. ``block_v`` (value rows a program) and ``num_warps`` are tuning
    knobs; with block_v < DV calls on concurrent streams must not overlap (shared arrival counters)."""
    T = mixed_qkv.shape[0]
    N, S = state_indices.shape
    Hk, Hv, Dk, Dv = num_k_heads, num_v_heads, head_k_dim, head_v_dim
    if Hv % Hk or S > 8 or state.shape[1:] != (Hv, Dv, Dk) or state.stride(1) != Dv * Dk:
        raise ValueError("unsupported GDN geometry for the fused core")
    if gate not in ("sigmoid", "silu"):
        raise ValueError(f"gate must be 'sigmoid' or 'silu', not {gate!r}")
    if out is None:
        out = torch.empty((T, Hv * Dv), dtype=torch.bfloat16, device=mixed_qkv.device)
    if T == 0:
        return out
    if scale is None:
        scale = Dk ** -0.5
    if block_v is None:
        # measured on the H200 (notes/kernels-attention-gdn.md, value-block sweep): 32 rows a program for one request
        # (9.4 us at 4 tokens), 64 from two requests on (11.8 us at 8 tokens, 12.7 at 16)
        block_v = 32 if N <= 1 else 64
    block_v = min(block_v, Dv)
    if Dv % block_v:
        raise ValueError("block_v must divide the value head dim")
    # PDL measured faster up to two requests (8 tokens) and slower from four (notes/kernels-decode-width.md)
    pdl = pdl_enabled(mixed_qkv) and N <= 2
    cnt = arrival_counters(mixed_qkv.device, N * Hv, user="gdn_decode")
    _gdn_decode_kernel[(N + 1, Hv, Dv // block_v)](
        mixed_qkv, z, b, a, A_log, dt_bias, norm_weight, state, cu_seqlens, num_accepted, state_indices, out, cnt,
        N, T, S, mixed_qkv.stride(0), z.stride(0), b.stride(0), a.stride(0), out.stride(0), state.stride(0),
        state_indices.stride(0), float(scale), float(eps),
        HK=Hk, HV=Hv, DK=Dk, DV=Dv, BV=block_v, S_MAX=max(triton.next_power_of_2(S), 2),
        GATE_SILU=(gate == "silu"), STATE_BF16=(state.dtype == torch.bfloat16), PDL=pdl, num_warps=num_warps,
        **({"launch_pdl": True} if pdl else {}),
    )
    return out
