"""Stock path of the Gated DeltaNet speculative-decode core (docs/semantics.md 3.10, step 2), plain PyTorch.

Per sequence n and value head v, from the state slot of the last accepted candidate ``idx[n, acc[n]-1]`` (a
slot ``<= 0``: a padding sequence, zero output, nothing stored), for each of the sequence's tokens in order:

* ``k^ = k / sqrt(sum k^2 + 1e-6)``, ``q^ = q / sqrt(sum q^2 + 1e-6) * scale``;
* ``decay = exp(-exp(A_log) * softplus(a + dt_bias))``, ``beta = sigmoid(b)``;
* ``H <- decay * H``; ``u = beta * (v - H k^)``; ``H <- H + u k^T``; ``o = H q^``; ``H`` stored to slot
  ``idx[n, t]`` when > 0;
* ``y = bf16(o^ * rsqrt(mean(o^2) + eps) * w * gate(z))``, ``o^ = bf16(o)``, gate ``sigmoid`` or ``silu``.

Vectorised over sequences and heads with a loop over the candidate positions and no host synchronisation
(CUDA-graph capturable). :func:`gdn_decode_fp64` is the same in fp64 without the rounding of ``o``."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from .._out import into


def _core(mixed_qkv, z, b, a, A_log, dt_bias, norm_weight, state, cu_seqlens, num_accepted, state_indices,
          num_k_heads, num_v_heads, head_k_dim, head_v_dim, eps, gate, scale, dtype, round_o, write_state):
    T = mixed_qkv.shape[0]
    N, S = state_indices.shape
    Hk, Hv, Dk, Dv = num_k_heads, num_v_heads, head_k_dim, head_v_dim
    rep = Hv // Hk
    dev = mixed_qkv.device
    if scale is None:
        scale = Dk ** -0.5
    q = mixed_qkv[:, : Hk * Dk].to(dtype).view(T, Hk, Dk)
    k = mixed_qkv[:, Hk * Dk: 2 * Hk * Dk].to(dtype).view(T, Hk, Dk)
    v = mixed_qkv[:, 2 * Hk * Dk: 2 * Hk * Dk + Hv * Dv].to(dtype).view(T, Hv, Dv)
    qn = (q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * scale).repeat_interleave(rep, dim=1)
    kn = (k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(rep, dim=1)
    x = a.to(dtype) + dt_bias.to(dtype)
    decay = torch.exp(-torch.exp(A_log.to(dtype)) * F.softplus(x, beta=1.0, threshold=20.0))  # [T, Hv]
    beta = torch.sigmoid(b.to(dtype))

    starts = cu_seqlens[:-1].long()
    lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    slots = state_indices.long()
    last = slots.gather(1, (num_accepted.long() - 1).clamp(0, S - 1)[:, None])[:, 0]
    valid = last > 0
    H = state[last.clamp(min=0)].to(dtype)  # [N, Hv, Dv, Dk]
    o_all = torch.zeros(T + 1, Hv, Dv, dtype=dtype, device=dev)  # row T: sink for inactive positions
    written = torch.zeros(T + 1, dtype=torch.bool, device=dev)
    for t in range(S):
        act = valid & (t < lens)
        row = (starts + t).clamp(max=max(T - 1, 0))
        kt = kn[row]
        Hn = H * decay[row][:, :, None, None]
        u = beta[row][..., None] * (v[row] - (Hn @ kt[..., None])[..., 0])
        Hn = Hn + u[..., None] * kt[:, :, None, :]
        o = (Hn @ qn[row][..., None])[..., 0]
        H = torch.where(act[:, None, None, None], Hn, H)
        if write_state:
            store = act & (slots[:, t] > 0)
            tgt = torch.where(store, slots[:, t], 0)  # non-stores write slot 0's own bytes back to it
            state.index_put_((tgt,), torch.where(store[:, None, None, None], H.to(state.dtype), state[tgt]))
        out_row = torch.where(act, row, T)
        o_all.index_put_((out_row,), o)
        written.index_put_((out_row,), act)
    o_all, written = o_all[:T], written[:T]
    ob = o_all.to(torch.bfloat16).to(dtype) if round_o else o_all
    r = torch.rsqrt((ob * ob).mean(-1, keepdim=True) + eps)
    zz = z.reshape(T, Hv, Dv).to(dtype)
    g = torch.sigmoid(zz) if gate == "sigmoid" else zz * torch.sigmoid(zz)
    y = ob * r * norm_weight.to(dtype) * g
    y = torch.where(written[:, None, None], y, torch.zeros((), dtype=dtype, device=dev))
    return y.reshape(T, Hv * Dv), H


def gdn_spec_decode_core(mixed_qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                         A_log: torch.Tensor, dt_bias: torch.Tensor, norm_weight: torch.Tensor, state: torch.Tensor,
                         cu_seqlens: torch.Tensor, num_accepted: torch.Tensor, state_indices: torch.Tensor,
                         num_k_heads: int, num_v_heads: int, head_k_dim: int = 128, head_v_dim: int = 128,
                         eps: float = 1e-6, gate: str = "sigmoid", scale: float | None = None,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """GDN speculative-decode core, stock composition; updates ``state`` in place.

    mixed_qkv: [T, 2*Hk*Dk + Hv*Dv] bf16 ``[q | k | v]`` (rows may be strided); z: [T, Hv*Dv] bf16; b, a: [T, Hv]
    bf16; A_log, dt_bias: [Hv] fp32; norm_weight: [Dv]; state: [slots, Hv, Dv, Dk] fp32 or bf16, contiguous;
    cu_seqlens: [N+1] int32; num_accepted: [N] int32 (1..S); state_indices: [N, S] int32; scale: default
    Dk**-0.5. Returns [T, Hv*Dv] bf16."""
    y, _ = _core(mixed_qkv, z, b, a, A_log, dt_bias, norm_weight, state, cu_seqlens, num_accepted, state_indices,
                 num_k_heads, num_v_heads, head_k_dim, head_v_dim, eps, gate, scale, torch.float32, True, True)
    y = y.to(torch.bfloat16)
    return into(out, y)


def gdn_decode_fp64(mixed_qkv, z, b, a, A_log, dt_bias, norm_weight, state, cu_seqlens, num_accepted,
                    state_indices, num_k_heads, num_v_heads, head_k_dim=128, head_v_dim=128, eps=1e-6,
                    gate="sigmoid", scale=None):
    """fp64 reference: ``(y fp64 [T, Hv*Dv], a fp64 copy of the state after the step)``."""
    st = state.to(torch.float64).clone()
    y, _ = _core(mixed_qkv, z, b, a, A_log, dt_bias, norm_weight, st, cu_seqlens, num_accepted, state_indices,
                 num_k_heads, num_v_heads, head_k_dim, head_v_dim, eps, gate, scale, torch.float64, False, True)
    return y, st
