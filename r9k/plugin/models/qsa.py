"""QSA (the indexer's top-k selection and sparse attention over the selected tokens) on vLLM's CPU backend, in
plain PyTorch, with this project's indexer glue (op ``qsa_glue``) where chosen; one opaque torch custom op.

Semantics: transformers' ``Qwen4ExpTextQSAIndexer`` and docs/semantics.md 3.7, 3.8a, 3.9 (while a context fits
``indexer_budget`` every group is kept: dense causal attention). vLLM's CPU attention keeps its paged cache in an
ISA-specific layout, so this op keeps its own copy of each token's K, V and raw index key in vLLM's blocks (the
same block ids and slots, so prefix caching and preemption keep working); vLLM's attention kernel does not run
for these layers.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from .. import report
from ...kernels import ops
from ..dispatch import get_table

GLUE = "qsa_glue"
_STATES: dict[str, "QsaState"] = {}
_OP = None


class QsaState:
    """One QSA layer's constants, its glue function and its private K/V/index-key blocks."""

    def __init__(self, layer: str, attn_name: str, block_size: int, heads: int, kv_heads: int, head_dim: int,
                 scale: float, idx_heads: int, idx_dim: int, ratio: int, budget: int, q_norm, k_norm,
                 cos_sin_cache: torch.Tensor, eps: float, glue: Callable, glue_fused: bool):
        self.layer, self.attn_name, self.block_size = layer, attn_name, block_size
        self.heads, self.kv_heads, self.head_dim, self.scale = heads, kv_heads, head_dim, scale
        self.idx_heads, self.idx_dim, self.ratio, self.topk = idx_heads, idx_dim, ratio, budget // ratio
        self.q_norm, self.k_norm = q_norm, k_norm  # the indexer's norm weights (modules: loaded later)
        self.cos_sin = cos_sin_cache
        self.eps = eps
        self.glue, self.glue_fused = glue, glue_fused
        self.width = 2 * kv_heads * head_dim + idx_dim  # [K | V | raw index key] per token
        self.blocks: dict[int, torch.Tensor] = {}

    def norm_rope(self, x: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.glue_fused:
            report.hit(GLUE, "fused")
        return self.glue(x, weight, positions, self.cos_sin, self.eps)

    # ------------------------------------------------------------------------------------- the cache copy

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        bs = self.block_size
        for blk in torch.unique(slots // bs).tolist():
            sel = (slots // bs) == blk
            b = self.blocks.get(blk)
            if b is None:
                b = self.blocks[blk] = rows.new_zeros((bs, self.width))
            b[slots[sel] % bs] = rows[sel]

    def read(self, block_row: torch.Tensor, n: int) -> torch.Tensor:
        bs = self.block_size
        ids = block_row[: -(-n // bs)].tolist()
        return torch.cat([self.blocks[i] for i in ids])[:n]

    # ------------------------------------------------------------------------------------------- the math

    def request(self, q, iq, rows, start: int, pos: torch.Tensor) -> torch.Tensor:
        """One request: queries ``q`` [t, H, D] and index queries ``iq`` [t, Hi, Di] (normed, roped) of its new
        tokens at positions ``pos`` (``start`` .. ``start + t - 1``), over its cached rows [S, width]."""
        S = rows.shape[0]
        kvd = self.kv_heads * self.head_dim
        K = rows[:, :kvd].view(S, self.kv_heads, self.head_dim)
        V = rows[:, kvd: 2 * kvd].view(S, self.kv_heads, self.head_dim)
        raw = rows[:, 2 * kvd:]
        r = self.ratio
        G = S // r
        t = q.shape[0]
        keep = torch.zeros((t, S), dtype=torch.bool, device=q.device)
        j = torch.arange(S, device=q.device)
        nb = (pos + 1) // r  # visible complete groups per row
        if G > 0:
            pooled = raw[: G * r].view(G, r, self.idx_dim).float().mean(dim=1).to(raw.dtype)
            starts = torch.arange(G, device=q.device) * r
            gk = self.norm_rope(pooled[:, None, :], self.k_norm.weight, starts)[:, 0]
            scores = torch.relu(torch.einsum("thd,gd->tgh", iq.float(), gk.float())).sum(-1) / math.sqrt(self.idx_dim)
            chosen = torch.zeros((t, G), dtype=torch.bool, device=q.device)
            for i, n in enumerate(nb.tolist()):  # per row over its visible groups, as transformers' indexer does:
                if n > self.topk:  # the same topk call on the same scores (relu makes exact ties, at 0, common)
                    chosen[i, scores[i, :n].topk(self.topk).indices] = True
                else:
                    chosen[i, :n] = True
            in_groups = j[None, :] < (nb * r)[:, None]
            keep |= in_groups & chosen[:, (j // r).clamp_max(G - 1)]
        keep |= (j[None, :] >= (nb * r)[:, None]) & (j[None, :] <= pos[:, None])  # the causal tail
        rep = self.heads // self.kv_heads
        Kh = K.repeat_interleave(rep, dim=1).float()
        Vh = V.repeat_interleave(rep, dim=1).float()
        logits = torch.einsum("thd,shd->hts", q.float(), Kh) * self.scale
        logits = logits.masked_fill(~keep[None], float("-inf"))
        w = torch.softmax(logits, dim=-1)
        return torch.einsum("hts,shd->thd", w, Vh).to(q.dtype)

    def forward(self, q, k, v, idx_qk, positions) -> torch.Tensor:
        from vllm.forward_context import get_forward_context

        T = q.shape[0]
        out = q.new_zeros((T, self.heads * self.head_dim))
        md = get_forward_context().attn_metadata
        if isinstance(md, list):  # micro-batches: not used on the CPU backend
            md = md[0]
        md = md.get(self.attn_name) if isinstance(md, dict) else None
        if md is None:  # a profiling or dummy run: no cache, no requests
            return out
        n = int(md.num_actual_tokens)
        pos = positions[0] if positions.dim() == 2 else positions
        idh = self.idx_heads * self.idx_dim
        iq = self.norm_rope(idx_qk[:n, :idh].view(n, self.idx_heads, self.idx_dim), self.q_norm.weight, pos[:n])
        rows = torch.cat([k[:n], v[:n], idx_qk[:n, idh: idh + self.idx_dim]], dim=-1)
        slots = md.slot_mapping[:n].long()
        self.write(slots, rows)
        qsl = md.query_start_loc.tolist()
        for rq in range(len(qsl) - 1):
            a, b = qsl[rq], qsl[rq + 1]
            if b <= a:
                continue
            S = int(md.seq_lens[rq])
            p = pos[a:b].long()
            bs = self.block_size
            if not torch.equal(md.block_table[rq, p // bs].long() * bs + p % bs, slots[a:b]):
                raise RuntimeError(f"r9k: {self.layer}: vLLM's slot mapping does not follow its block table at "
                                   f"block size {bs}: the QSA cache copy cannot be addressed")
            cached = self.read(md.block_table[rq], S)
            o = self.request(q[a:b].view(b - a, self.heads, self.head_dim), iq[a:b], cached, S - (b - a), pos[a:b])
            out[a:b] = o.reshape(b - a, -1)
        return out


def _op():
    global _OP
    if _OP is None:
        from ..layers import _common

        def impl(q, k, v, idx_qk, positions, key):
            return _STATES[key].forward(q, k, v, idx_qk, positions)

        def fake(q, k, v, idx_qk, positions, key):
            st = _STATES[key]
            return q.new_empty((q.shape[0], st.heads * st.head_dim))

        _OP = _common.opaque("qsa_sparse_attention",
                             "(Tensor q, Tensor k, Tensor v, Tensor idx_qk, Tensor positions, str key) -> Tensor",
                             impl, fake)
    return _OP


def build(layer: str, attn, indexer, config, block_size: int) -> str:
    """Register the QSA state of one layer (``attn``: vLLM's ``Qwen3NextAttention``) and its glue; returns its key."""

    table = get_table()
    choice = table.choose(GLUE, layer=layer) if table is not None and GLUE in table.by_op else None
    fused = choice is not None and choice.state == "fused"
    if fused:
        report.layer(GLUE, layer, installed=True)
    rot = attn.rotary_emb
    st = QsaState(layer, attn.attn.layer_name, block_size, attn.num_heads, attn.num_kv_heads, attn.head_dim,
                  attn.scaling, config.indexer_n_heads, config.indexer_head_dim, config.indexer_compress_ratio,
                  config.indexer_budget, indexer.q_layernorm, indexer.k_layernorm,
                  rot.cos_sin_cache.to(torch.bfloat16), config.rms_norm_eps,
                  choice.fn if fused else ops.get(GLUE).stock, fused)
    _STATES[layer] = st
    return layer


def attention(key: str, q, k, v, idx_qk, positions) -> torch.Tensor:
    return _op()(q, k, v, idx_qk, positions, key)
