"""The parts of the decode step this project does not fuse, one plain implementation shared by every
profile (so two profiles differ only in what the registry switches):

* GDN ``in_proj_ba`` (bf16 GEMM) and the causal conv update with accepted-token roll-back (3.10 step 1), one
  Triton launch as vLLM's ``causal_conv1d_update`` (this project's kernel: vLLM's keeps one state column fewer);
* attention: KV write into a paged cache, the QSA indexer's scoring and top-group selection (3.8a), the
  attention itself over the selected tokens of the paged cache (3.9), ``sigmoid(gate) * out``;
* routed experts: a W8A16 Triton GEMM over (token, expert) pairs (fp8 e4m3 weights, one fp32 scale per
  output row), SiLU-and-mul, the router-weight fold and the top-k sum with the shared expert (one launch).

Everything here is capturable in a CUDA graph (no host synchronisation, static shapes).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ...kernels._triton.common import INTERPRETED, to_bf16, use_triton

# ------------------------------------------------------------------------------------------ GDN


@triton.jit
def _conv_update_kernel(x_ptr, s_x, st_ptr, s_sn, s_sc, w_ptr, s_w, acc_ptr, out_ptr, s_o, C,
                        W: tl.constexpr, S: tl.constexpr, WIN: tl.constexpr, BLOCK_C: tl.constexpr,
                        INTERPRET: tl.constexpr):
    n = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    cols = tl.arange(0, WIN)
    a = tl.load(acc_ptr + n)
    hist = cols < W - 1
    live = cols < W - 1 + S
    st = st_ptr + n * s_sn + c[:, None] * s_sc
    h = tl.load(st + (a + cols)[None, :], mask=cm[:, None] & hist[None, :], other=0.0)
    xr = n * S + cols - (W - 1)
    xv = tl.load(x_ptr + xr[None, :] * s_x + c[:, None], mask=cm[:, None] & (live & ~hist)[None, :], other=0.0)
    win = tl.where(hist[None, :], h, xv)  # [BLOCK_C, WIN] bf16: the W-1 accepted inputs, then this step's
    tl.debug_barrier()  # every history column is read before any program thread overwrites the state
    tl.store(st + cols[None, :], win, mask=cm[:, None] & live[None, :])
    wf = win.to(tl.float32)
    for t in tl.static_range(S):
        y = tl.zeros([BLOCK_C], tl.float32)
        for j in tl.static_range(W):
            tap = tl.sum(tl.where((cols == t + j)[None, :], wf, 0.0), axis=1)
            y += tap * tl.load(w_ptr + c * s_w + j, mask=cm, other=0.0).to(tl.float32)
        y = y / (1.0 + tl.exp(-y))
        tl.store(out_ptr + (n * S + t) * s_o + c, to_bf16(y, INTERPRET), mask=cm)


def conv_update(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, num_accepted: torch.Tensor,
                spec: int) -> torch.Tensor:
    """Depthwise causal conv (width W, no bias) + SiLU over ``spec`` new tokens a request, with roll-back, in one
    launch (as vLLM's ``causal_conv1d_update`` is one launch); :func:`conv_update_torch` is its reference.

    x [N*spec, C] bf16 (rows may be strided), conv_state [N, C, W-1+spec] bf16: the W-1 inputs before the
    previous step's candidates, then those candidates. The history of this step is the W-1 columns ending
    at the previous step's last accepted candidate (``num_accepted`` [N], 1..spec). The state is replaced by
    ``[history | this step's inputs]``. Returns [N*spec, C] bf16 (unit column stride).
    """
    N, C, L = conv_state.shape
    W = weight.shape[1]
    if not use_triton(x) or x.stride(1) != 1 or conv_state.stride(2) != 1 or weight.stride(1) != 1:
        return conv_update_torch(x, conv_state, weight, num_accepted, spec)
    out = torch.empty((N * spec, C), dtype=torch.bfloat16, device=x.device)
    block_c = 128
    _conv_update_kernel[(N, triton.cdiv(C, block_c))](
        x, x.stride(0), conv_state, conv_state.stride(0), conv_state.stride(1), weight, weight.stride(0),
        num_accepted, out, out.stride(0), C, W=W, S=spec, WIN=triton.next_power_of_2(W - 1 + spec),
        BLOCK_C=block_c, INTERPRET=INTERPRETED, num_warps=4)
    return out


def conv_update_torch(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, num_accepted: torch.Tensor,
                      spec: int) -> torch.Tensor:
    """Plain-PyTorch form of :func:`conv_update` (14 launches; the reference of its test)."""
    N, C, L = conv_state.shape
    W = weight.shape[1]
    idx = (num_accepted.long()[:, None] + torch.arange(W - 1, device=x.device)[None, :])  # [N, W-1]
    hist = conv_state.gather(2, idx[:, None, :].expand(N, C, W - 1))
    xs = x.reshape(N, spec, C).transpose(1, 2)
    window = torch.cat([hist, xs], dim=2)  # [N, C, W-1+spec]
    conv_state.copy_(window)
    taps = window.float().unfold(2, W, 1)  # [N, C, spec, W]
    y = (taps * weight.float()[None, :, None, :]).sum(-1)
    return F.silu(y).to(torch.bfloat16).transpose(1, 2).contiguous().view(N * spec, C)  # unit column stride


# ------------------------------------------------------------------------------------ attention


def kv_write(k_pool: torch.Tensor, v_pool: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor):
    """Write the new tokens' keys/values ([M, hkv*D]) into the paged pools [pages, page, hkv, D] at ``slots`` [M]."""
    P, page, hkv, D = k_pool.shape
    k_pool.view(P * page, hkv, D).index_copy_(0, slots, k.reshape(-1, hkv, D))
    v_pool.view(P * page, hkv, D).index_copy_(0, slots, v.reshape(-1, hkv, D))


def indexer_select(iq: torch.Tensor, ckeys: torch.Tensor, positions: torch.Tensor, requests: int, context: int,
                   group: int, top_groups: int) -> torch.Tensor:
    """The QSA indexer's token mask: for each query row, the top groups by
    ``sum_h relu(q_h . key_g) / sqrt(Dk)`` over its complete visible groups, expanded to their tokens, plus the
    causal tail of its own group; returns a bool mask [M, context] (True = attend).

    iq [M, H, Dk] (normed + roped), ckeys [R, G, Dk] (compressed keys), positions [M] (token positions).
    """
    M, H, Dk = iq.shape
    G = ckeys.shape[1]
    spec = M // requests
    q = iq.float().view(requests, spec, H, Dk)
    s = torch.einsum("rshd,rgd->rshg", q, ckeys.float()).relu().sum(2) / (Dk ** 0.5)  # [R, spec, G]
    s = s.reshape(M, G)
    pos = positions.long()
    visible = torch.arange(G, device=iq.device)[None, :] < ((pos + 1) // group)[:, None]
    s = s.masked_fill(~visible, float("-inf"))
    k = min(top_groups, G)
    top = s.topk(k, dim=1).indices
    chosen = torch.zeros(M, G, dtype=torch.bool, device=iq.device).scatter_(1, top, True) & visible
    tok = chosen.repeat_interleave(group, dim=1)[:, :context]
    t = torch.arange(context, device=iq.device)[None, :]
    own = (t >= (pos // group * group)[:, None]) & (t <= pos[:, None])
    return tok | own


def attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, page_table: torch.Tensor,
              mask: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Masked softmax attention of q [M, hq*D] over each request's paged K/V (``page_table`` [R, pages]),
    fp32 softmax with scale 1/sqrt(D); mask [M, context]. Returns [M, hq*D] bf16."""
    R, pages = page_table.shape
    _, page, hkv, D = k_pool.shape
    M = q.shape[0]
    spec = M // R
    ctx = mask.shape[1]
    K = k_pool[page_table].view(R, pages * page, hkv, D)[:, :ctx]
    V = v_pool[page_table].view(R, pages * page, hkv, D)[:, :ctx]
    rep = num_heads // hkv
    qh = q.view(R, spec, hkv, rep, D).float()
    s = torch.einsum("rsgqd,rtgd->rgqst", qh, K.float()) * (D ** -0.5)
    s = s.masked_fill(~mask.view(R, 1, 1, spec, ctx), float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("rgqst,rtgd->rsgqd", p, V.float())
    return o.to(torch.bfloat16).reshape(M, num_heads * D)


# ---------------------------------------------------------------------------------------- MoE


@triton.jit
def _pair_gemm_kernel(x_ptr, stride_x, ids_ptr, w_ptr, s_ptr, rw_ptr, out_ptr, N, K, TOPK,
                      X_PER_TOKEN: tl.constexpr, HAS_RW: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, INTERPRET: tl.constexpr):
    """out[p, n] = bf16(s[e, n] * sum_k x[row(p), k] * W[e, n, k] [* rw[p]]) with e = ids[p]."""
    p = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    e = tl.load(ids_ptr + p).to(tl.int64)
    if X_PER_TOKEN:
        row = p // TOPK
    else:
        row = p
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(x_ptr + row * stride_x + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + e * N * K + offs_n[:, None] * K + offs_k[None, :],
                    mask=n_mask[:, None] & k_mask[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], axis=1)
    acc = acc * tl.load(s_ptr + e * N + offs_n, mask=n_mask, other=0.0)
    if HAS_RW:
        acc = acc * tl.load(rw_ptr + p)
    tl.store(out_ptr + p * N + offs_n, to_bf16(acc, INTERPRET), mask=n_mask)


def pair_gemm(x: torch.Tensor, ids: torch.Tensor, w_q: torch.Tensor, w_s: torch.Tensor, rw=None,
              x_per_token: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """W8A16 GEMM of each (row, selected expert) pair: x [M, K] bf16 (or [M*k, K] with ``x_per_token=False``),
    ids [M, k] int32, w_q [E, N, K] e4m3, w_s [E, N] fp32, rw [M, k] fp32 (router weights, folded in).
    Returns [M*k, N] bf16 (into ``out`` if given)."""
    pairs = ids.numel()
    E, N, K = w_q.shape
    if not use_triton(x):
        y = pair_gemm_torch(x, ids, w_q, w_s, rw, x_per_token)
        return out.copy_(y) if out is not None else y
    if out is None:
        out = torch.empty((pairs, N), dtype=torch.bfloat16, device=x.device)
    block_n = 64 if N <= 512 else 128
    _pair_gemm_kernel[(pairs, triton.cdiv(N, block_n))](
        x, x.stride(0), ids, w_q, w_s, rw if rw is not None else w_s, out, N, K, ids.shape[1],
        X_PER_TOKEN=x_per_token, HAS_RW=rw is not None, BLOCK_N=block_n, BLOCK_K=128 if K >= 128 else 64,
        INTERPRET=INTERPRETED, num_warps=4)
    return out


def pair_gemm_torch(x, ids, w_q, w_s, rw=None, x_per_token: bool = True) -> torch.Tensor:
    """Reference of :func:`pair_gemm` (gathers each pair's weight; for tests and machines without Triton)."""
    flat = ids.reshape(-1).long()
    rows = x.float().repeat_interleave(ids.shape[1], dim=0) if x_per_token else x.float()
    w = w_q[flat].float() * w_s[flat].float()[:, :, None]
    y = torch.einsum("pk,pnk->pn", rows, w)
    if rw is not None:
        y = y * rw.reshape(-1, 1).float()
    return y.to(torch.bfloat16)


def routed_experts(x, ids, rw, w1_q, w1_s, w2_q, w2_s) -> torch.Tensor:
    """Routed experts of the selected pairs, router weight folded into the down GEMM: [M*k, HD] bf16."""
    gu = pair_gemm(x, ids, w1_q, w1_s)
    inter = gu.shape[1] // 2
    act = (F.silu(gu[:, :inter].float()) * gu[:, inter:].float()).to(torch.bfloat16)
    return pair_gemm(act, ids, w2_q, w2_s, rw=rw, x_per_token=False)


@triton.jit
def _moe_sum_kernel(r_ptr, s_r, sh_ptr, s_sh, out_ptr, s_o, H, TOPK: tl.constexpr, BLOCK: tl.constexpr,
                    INTERPRET: tl.constexpr):
    m = tl.program_id(0)
    h = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    hm = h < H
    acc = tl.zeros([BLOCK], tl.float32)
    for j in tl.static_range(TOPK):  # in expert order, as the reference's sum
        acc += tl.load(r_ptr + (m * TOPK + j) * s_r + h, mask=hm, other=0.0).to(tl.float32)
    acc += tl.load(sh_ptr + m * s_sh + h, mask=hm, other=0.0).to(tl.float32)
    tl.store(out_ptr + m * s_o + h, to_bf16(acc, INTERPRET), mask=hm)


def moe_sum(routed: torch.Tensor, shared: torch.Tensor, top_k: int) -> torch.Tensor:
    """``bf16(sum_j routed[m, j] + shared[m])`` in fp32, one launch (vLLM sums the top-k in one launch too);
    :func:`moe_sum_torch` is its reference."""
    M, H = shared.shape
    if not use_triton(shared) or routed.stride(1) != 1 or shared.stride(1) != 1:
        return moe_sum_torch(routed, shared, top_k)
    out = torch.empty((M, H), dtype=torch.bfloat16, device=shared.device)
    block = 1024
    _moe_sum_kernel[(M, triton.cdiv(H, block))](routed, routed.stride(0), shared, shared.stride(0), out,
                                                 out.stride(0), H, TOPK=top_k, BLOCK=block, INTERPRET=INTERPRETED,
                                                 num_warps=4)
    return out


def moe_sum_torch(routed: torch.Tensor, shared: torch.Tensor, top_k: int) -> torch.Tensor:
    """Plain-PyTorch form of :func:`moe_sum` (5 launches)."""
    M = shared.shape[0]
    return (routed.float().view(M, top_k, -1).sum(1) + shared.float()).to(torch.bfloat16)
