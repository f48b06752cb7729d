"""One TP4 rank of Qwen3.8-Flash-Next at decode, built from the project's ops (docs/semantics.md 1.1, 2).

:class:`Weights`: synthetic weights in the checkpoint's formats, shareable by several models (one per profile).
:class:`DecodeStepModel`: one profile's ops (picked once by a chooser, :mod:`.dispatch`); ``step()`` runs one
MTP-3 verify step through the layers in :mod:`r9k.plugin.models.schedule`'s order and returns the final
hyper-connection mixer's output. Not modelled: the all-reduces (one rank), MTP drafts, LM head, sampling.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
from dataclasses import dataclass, field
from typing import Mapping, Optional
from unittest import mock

import torch
import torch.nn.functional as F

from ...plugin.models import schedule

from .config import StepConfig
from .dispatch import STEP_OPS, Chooser, Pick

FP8 = torch.float8_e4m3fn
Q_STD = 64.0  # spread of the synthetic e4m3 codes (|code| <= 448)


def _codes(shape, gen, device) -> torch.Tensor:
    """Random e4m3 codes ~ N(0, Q_STD), clamped to the finite range."""
    t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32 if device == "cpu" else torch.bfloat16)
    return (t * Q_STD).clamp_(-448, 448).to(FP8)


def _bf16(shape, gen, device, std) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * std).to(torch.bfloat16)


def _uniform(shape, gen, device, lo, hi) -> torch.Tensor:
    return torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * (hi - lo) + lo


def block_fp8(n: int, k: int, gen, device) -> tuple[torch.Tensor, torch.Tensor]:
    """A block-fp8 linear as in the checkpoint: codes [N, K] e4m3, dequant multipliers [ceil(N/128), K/128]
    fp32, scaled so that a unit-RMS input gives a unit-RMS output."""
    s = 1.0 / (Q_STD * math.sqrt(k))
    return _codes((n, k), gen, device), _uniform((-(-n // 128), k // 128), gen, device, 0.8 * s, 1.2 * s)


def rowwise_fp8(e: int, n: int, k: int, gen, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert weights for the plain W8A16 GEMM: codes [E, N, K] e4m3, one fp32 scale per output row."""
    s = 1.0 / (Q_STD * math.sqrt(k))
    return _codes((e, n, k), gen, device), _uniform((e, n), gen, device, 0.8 * s, 1.2 * s)


def rope_cache(positions: int, rotary: int, theta: float, device) -> torch.Tensor:
    """[positions, rotary] bf16 rows ``[cos | sin]`` (neox halves)."""
    half = rotary // 2
    inv = 1.0 / (theta ** (torch.arange(half, dtype=torch.float64) * 2 / rotary))
    ang = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=1).to(torch.bfloat16).to(device)


@dataclass
class Weights:
    """Synthetic weights of one rank; built once, shared by every model (profile) and request count."""

    cfg: StepConfig
    device: str
    hc: list = field(default_factory=list)  # per HC module: dict(norm, down, up)
    layers: list = field(default_factory=list)  # per layer: dict of tensors

    @classmethod
    def build(cls, cfg: StepConfig, device: str = "cpu", seed: int = 0) -> "Weights":
        from ...kernels.shared_expert import prepare_shared_expert, quantize_mxfp4  # its load-time helpers

        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        w = cls(cfg, device)
        HD, DIM = cfg.hidden, cfg.dim
        for _ in range(cfg.hc_modules):
            down = _bf16((cfg.down_rows, DIM), gen, device, 1.0 / math.sqrt(DIM))
            down[cfg.lora + cfg.hc:] = 0  # zero padding rows of the merged down+inject weight
            w.hc.append(dict(norm=_bf16((DIM,), gen, device, 0.1), down=down,
                             up=_bf16((DIM, cfg.lora), gen, device, 1.0 / math.sqrt(cfg.lora))))
        for kind in cfg.layer_kinds():
            L: dict = {"kind": kind}
            if kind == "gdn":
                Hv, D = cfg.gdn_v_heads, cfg.gdn_head
                L["qkvz"] = block_fp8(*cfg.gdn_qkvz, gen, device)
                L["ba"] = _bf16((2 * Hv, HD), gen, device, 1.0 / math.sqrt(HD))
                L["conv"] = _bf16((cfg.gdn_conv_channels, cfg.conv_width), gen, device, 0.5)
                L["A_log"] = torch.log(_uniform((Hv,), gen, device, 1.0, 16.0))
                L["dt_bias"] = _uniform((Hv,), gen, device, -1.0, 1.0)
                L["norm"] = (1.0 + _bf16((D,), gen, device, 0.1).float()).to(torch.bfloat16)
                L["out"] = block_fp8(*cfg.gdn_out, gen, device)
            else:
                D = cfg.attn_head
                L["qkv"] = block_fp8(*cfg.attn_qkv, gen, device)
                L["q_norm"] = _bf16((D,), gen, device, 0.1)
                L["k_norm"] = _bf16((D,), gen, device, 0.1)
                L["idx"] = _bf16(((cfg.idx_heads + 1) * cfg.idx_head, HD), gen, device, 1.0 / math.sqrt(HD))
                L["idx_q_norm"] = _bf16((cfg.idx_head,), gen, device, 0.1)
                L["idx_k_norm"] = _bf16((cfg.idx_head,), gen, device, 0.1)
                L["o"] = block_fp8(*cfg.attn_o, gen, device)
            E, I = cfg.experts, cfg.expert_inter
            L["router"] = _bf16((E, HD), gen, device, 1.0 / math.sqrt(HD))
            L["w1"] = rowwise_fp8(E, 2 * I, HD, gen, device)
            L["w2"] = rowwise_fp8(E, HD, I, gen, device)
            # the shared expert in the checkpoint's format (MXFP4 codes + E8M0 scales, bf16 gate)
            se_gu = _bf16((2 * cfg.shared_inter, HD), gen, device, 1.0 / math.sqrt(HD))
            se_down = _bf16((HD, cfg.shared_inter), gen, device, 1.0 / math.sqrt(cfg.shared_inter))
            se_gate = _bf16((1, HD), gen, device, 1.0 / math.sqrt(HD))
            L["se"] = prepare_shared_expert(*quantize_mxfp4(se_gu), *quantize_mxfp4(se_down), se_gate)
            w.layers.append(L)
        return w


@dataclass
class StepInputs:
    """The step's input hidden and the initial decode state (caches, GDN states) for ``requests`` requests
    at ``context`` tokens; every model clones the state, so all start from the same point."""

    cfg: StepConfig
    device: str
    requests: int
    context: int
    x0: torch.Tensor
    state0: list  # per layer: dict of initial caches/states

    @classmethod
    def build(cls, cfg: StepConfig, requests: int, context: int, device: str = "cpu", seed: int = 1) -> "StepInputs":
        if context % cfg.idx_group or context < cfg.spec_tokens or context % cfg.page:
            raise ValueError(f"context must be a multiple of {cfg.page} and of {cfg.idx_group}")
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        R, S = requests, cfg.spec_tokens
        pages = context // cfg.page
        state0 = []
        for kind in cfg.layer_kinds():
            st = {}
            if kind == "gdn":
                Hv, D = cfg.gdn_v_heads, cfg.gdn_head
                st["conv"] = _bf16((R, cfg.gdn_conv_channels, cfg.conv_width - 1 + S), gen, device, 1.0)
                st["state"] = torch.randn((1 + R * S, Hv, D, D), generator=gen, device=device) * 0.05
            else:
                hkv, D = cfg.attn_kv_heads, cfg.attn_head
                st["k"] = _bf16((R * pages, cfg.page, hkv, D), gen, device, 1.0)
                st["v"] = _bf16((R * pages, cfg.page, hkv, D), gen, device, 1.0)
                st["ckeys"] = _bf16((R, context // cfg.idx_group, cfg.idx_head), gen, device, 1.0)
            state0.append(st)
        return cls(cfg, device, R, context, _bf16((R * S, cfg.hidden), gen, device, 1.0), state0)


# The parts the project does not fuse: one plain, graph-capturable implementation shared by every profile.


def conv_update(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, num_accepted: torch.Tensor,
                      spec: int) -> torch.Tensor:
    """Depthwise causal conv (width W, no bias) + SiLU over ``spec`` new tokens a request, with roll-back.

    x [N*spec, C] bf16, conv_state [N, C, W-1+spec] bf16; the history is the W-1 columns ending at the previous
    step's last accepted candidate (``num_accepted`` [N], 1..spec); the state becomes ``[history | x]``.
    """
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


def kv_write(k_pool: torch.Tensor, v_pool: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor):
    """Write the new tokens' keys/values ([M, hkv*D]) into the paged pools [pages, page, hkv, D] at ``slots`` [M]."""
    P, page, hkv, D = k_pool.shape
    k_pool.view(P * page, hkv, D).index_copy_(0, slots, k.reshape(-1, hkv, D))
    v_pool.view(P * page, hkv, D).index_copy_(0, slots, v.reshape(-1, hkv, D))


def indexer_select(iq: torch.Tensor, ckeys: torch.Tensor, positions: torch.Tensor, requests: int, context: int,
                   group: int, top_groups: int) -> torch.Tensor:
    """The QSA indexer's bool mask [M, context] (True = attend): per query row the top visible groups by
    ``sum_h relu(q_h . key_g) / sqrt(Dk)``, expanded to tokens, plus the causal tail of its own group.
    iq [M, H, Dk] (normed + roped), ckeys [R, G, Dk], positions [M]."""
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


def pair_gemm(x, ids, w_q, w_s, rw=None, x_per_token: bool = True) -> torch.Tensor:
    """W8A16 GEMM of each (row, selected expert) pair: x [M, K] bf16 (or [M*k, K] with ``x_per_token=False``),
    ids [M, k] int32, w_q [E, N, K] e4m3, w_s [E, N] fp32, rw [M, k] fp32 (router weights, folded in).
    Returns [M*k, N] bf16."""
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


def moe_sum(routed: torch.Tensor, shared: torch.Tensor, top_k: int) -> torch.Tensor:
    """``bf16(sum_j routed[m, j] + shared[m])`` in fp32."""
    M = shared.shape[0]
    return (routed.float().view(M, top_k, -1).sum(1) + shared.float()).to(torch.bfloat16)


def _tensors(v) -> list:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (tuple, list)):
        return [t for x in v for t in _tensors(x)]
    if hasattr(v, "__dataclass_fields__"):
        return [t for f in v.__dataclass_fields__ for t in _tensors(getattr(v, f))]
    return []


def _unique_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel())
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


class _HcModule:
    """HC module ``i`` of a :class:`DecodeStepModel`, as the shared schedule calls it
    (:class:`r9k.plugin.models.schedule.HcModule`); the carry is the injection logits [M, hc]."""

    def __init__(self, model: "DecodeStepModel", i: int):
        self.model, self.i = model, i

    def combine_norm(self, res, block_output, inj):
        model, cfg = self.model, self.model.cfg
        with model._p("hc.combine_norm"):
            return model.picks["hc_combine_norm"].fn(res, block_output, inj, model.hc_w[self.i]["norm"], cfg.eps,
                                                     cfg.hc)

    def input_mix(self, res, xn):
        model, cfg, m = self.model, self.model.cfg, self.model.hc_w[self.i]
        with model._p("hc.mix"):
            if model.hc_fp8:
                buf, block = model.picks["hc_mix_fp8"].fn(xn, *m["fp8"], lora_rank=cfg.lora, hc_count=cfg.hc)
            else:
                buf, block = model.picks["hc_mix"].fn(xn, m["down"], m["up"], lora_rank=cfg.lora, hc_count=cfg.hc)
        return block, buf[:, cfg.lora: cfg.lora + cfg.hc]


class DecodeStepModel:
    """One profile's decode step over shared :class:`Weights`.

    choose:  ``op name -> Pick`` (``dispatch.values_chooser`` / ``dispatch.plugin_chooser``), asked once per op.
    flags:   ``{variant id: value}`` for variants that are not ops but change what the model holds
             (``hc_free_bf16``: drop the bf16 HC weights when the fp8 decode path replaces them).
    """

    def __init__(self, w: Weights, inputs: StepInputs, choose: Chooser,
                 flags: Optional[Mapping[str, Optional[str]]] = None):
        self.w, self.cfg, self.inp = w, w.cfg, inputs
        flags = dict(flags or {})
        # programmatic dependent launch: step() sets R9K_PDL per model; unset = off, as its stock
        self.pdl = flags.get("programmatic_dependent_launch") == "1"
        self.picks: dict[str, Pick] = {op: choose(op) for op in STEP_OPS}
        self.notes: list[str] = []
        # Hyper-connection mix: the fp8 decode path takes precedence over hc_mix when it is on (3.1, 3.3).
        self.hc_fp8 = self.picks["hc_mix_fp8"].fused
        self.variant_bytes: dict[str, int] = {}
        self.hc_w: list[dict] = []
        if self.hc_fp8:
            from ...kernels.hc_mix import prepare_hc_fp8

            added = 0
            for m in w.hc:
                dq, ds, uq, us = prepare_hc_fp8(m["down"], m["up"])
                added += _unique_bytes([dq, ds, uq, us])
                self.hc_w.append(dict(norm=m["norm"], fp8=(dq, ds, uq, us), down=m["down"], up=m["up"]))
            self.variant_bytes[self.picks["hc_mix_fp8"].variant] = added
            if flags.get("hc_free_bf16") == "1":
                freed = _unique_bytes([t for m in self.hc_w for t in (m.pop("down"), m.pop("up"))])
                self.variant_bytes["hc_free_bf16"] = -freed
        else:
            self.hc_w = [dict(m) for m in w.hc]
            if flags.get("hc_free_bf16") == "1":
                self.notes.append("hc_free_bf16=1 not applied: the bf16 HC weights are in use (fp8 decode off)")
        self.hc_modules = [_HcModule(self, i) for i in range(w.cfg.hc_modules)]
        self.profile_parts = False  # True: each part runs inside a profiler range "part:<name>"
        self.part_hook = None  # or a callable name -> context manager (e.g. LaunchCounter.part_scope)
        self._alloc_state()

    def _p(self, name: str):
        if self.profile_parts:
            return torch.profiler.record_function("part:" + name)
        if self.part_hook is not None:
            return self.part_hook(name)
        return contextlib.nullcontext()

    def _alloc_state(self):
        """This model's own copies of the caches/states, and the step's static metadata."""
        inp, cfg, dev = self.inp, self.cfg, self.w.device
        R, S, N = inp.requests, cfg.spec_tokens, inp.context
        self.state = [{k: v.clone() for k, v in st.items()} for st in inp.state0]
        ar = torch.arange(R, device=dev, dtype=torch.int32)
        self.cu = torch.arange(R + 1, device=dev, dtype=torch.int32) * S
        self.num_accepted = (S - (ar % S)).to(torch.int32)  # 4, 3, 2, 1, 4, ...: every roll-back case
        self.state_idx = (1 + ar[:, None] * S + torch.arange(S, device=dev, dtype=torch.int32)[None, :]).contiguous()
        pos = (N - S + torch.arange(S, device=dev))[None, :].expand(R, S).reshape(-1)
        # text tokens: MRoPE's t, h, w rows are equal, so the 1-D positions are passed (graph-capturable)
        self.pos1 = pos.contiguous()
        pages = -(-N // cfg.page)
        self.page_table = (ar.long()[:, None] * pages + torch.arange(pages, device=dev)[None, :])
        self.slots = (self.page_table.gather(1, (pos.view(R, S) // cfg.page)) * cfg.page
                      + (pos.view(R, S) % cfg.page)).reshape(-1)
        self.group_first = torch.full((R,), N - S, device=dev, dtype=torch.long)  # the new group's first token
        self.rope_attn = rope_cache(N, cfg.attn_rotary, cfg.rope_theta, dev)
        self.rope_idx = rope_cache(N, cfg.idx_rotary, cfg.rope_theta, dev)

    def reset_state(self):
        for st, st0 in zip(self.state, self.inp.state0):
            for k, v in st.items():
                v.copy_(st0[k])

    def _linear(self, x, wq_ws, part: str):
        with self._p(part):
            return self.picks["fp8_block_linear"].fn(x, *wq_ws)

    def _gdn(self, x, L, st):
        cfg = self.cfg
        Hk, Hv, D = cfg.gdn_k_heads, cfg.gdn_v_heads, cfg.gdn_head
        C = cfg.gdn_conv_channels
        qkvz = self._linear(x, L["qkvz"], "gdn.in_proj_fp8")
        with self._p("gdn.ba_conv"):
            ba = F.linear(x, L["ba"])
            mixed = conv_update(qkvz[:, :C], st["conv"], L["conv"], self.num_accepted, cfg.spec_tokens)
        with self._p("gdn.core"):
            core = self.picks["gdn_decode"].fn(
                mixed, qkvz[:, C:], ba[:, :Hv], ba[:, Hv:], L["A_log"], L["dt_bias"], L["norm"], st["state"],
                self.cu, self.num_accepted, self.state_idx, Hk, Hv, D, D, cfg.eps, "sigmoid")
        return self._linear(core, L["out"], "gdn.out_proj_fp8")

    def _attn(self, x, L, st):
        cfg = self.cfg
        hq, hkv, D = cfg.attn_q_heads, cfg.attn_kv_heads, cfg.attn_head
        M = x.shape[0]
        qkv = self._linear(x, L["qkv"], "attn.qkv_fp8")
        with self._p("attn.qk_norm_rope"):
            q, k, gate = self.picks["qk_norm_rope"].fn(qkv, L["q_norm"], L["k_norm"], self.pos1, self.rope_attn, hq,
                                                       hkv, D, cfg.eps, cfg.mrope_section, True)
        v = qkv[:, (2 * hq + hkv) * D:]
        with self._p("attn.kv_write"):
            kv_write(st["k"], st["v"], k, v, self.slots)
        # QSA indexer: projection, glue (norm + rope) of the query heads and of the newly completed group's key
        ih, idd = cfg.idx_heads, cfg.idx_head
        R, S = self.inp.requests, cfg.spec_tokens
        with self._p("attn.indexer_proj"):
            ix = F.linear(x, L["idx"])
            raw_k = ix[:, ih * idd:].float().view(R, S // cfg.idx_group, cfg.idx_group, idd).mean(2)
            new_keys = raw_k.to(torch.bfloat16).reshape(-1, 1, idd)  # one group of 4 tokens a request (S == 4)
        with self._p("attn.indexer_glue"):
            glue = self.picks["qsa_glue"].fn
            iq = glue(ix[:, : ih * idd].view(M, ih, idd), L["idx_q_norm"], self.pos1, self.rope_idx, cfg.eps)
            kn = glue(new_keys, L["idx_k_norm"], self.group_first, self.rope_idx, cfg.eps)
        with self._p("attn.indexer_select"):
            G = st["ckeys"].shape[1]
            st["ckeys"][:, G - 1].copy_(kn.view(R, idd))
            mask = indexer_select(iq, st["ckeys"], self.pos1, R, self.inp.context, cfg.idx_group,
                                        cfg.idx_top_groups)
        with self._p("attn.attention"):
            att = attention(q, st["k"], st["v"], self.page_table, mask, hq)
            att = (att.float() * torch.sigmoid(gate.float())).to(torch.bfloat16)
        return self._linear(att, L["o"], "attn.o_proj_fp8")

    def _moe(self, x, L):
        cfg = self.cfg
        with self._p("moe.router_gemm"):
            logits = self.picks["router_gemm"].fn(x, L["router"])
        with self._p("moe.route"):
            rw, ids = self.picks["moe_route"].fn(logits, cfg.top_k, cfg.renormalize)
        with self._p("moe.routed_experts"):
            routed = routed_experts(x, ids, rw, *L["w1"], *L["w2"])
        with self._p("moe.shared_expert"):
            shared = self.picks["shared_expert"].fn(x, L["se"])
        with self._p("moe.sum"):
            return moe_sum(routed, shared, cfg.top_k)

    def step(self, x0: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One decode step; returns the final mixer output [M, HD] bf16. Updates this model's caches.
        The kernels read ``R9K_PDL`` when they launch: it is set to this model's value for the step only."""
        with mock.patch.dict(os.environ, R9K_PDL="1" if self.pdl else "0"):
            return self._step(x0)

    def _step(self, x0: Optional[torch.Tensor]) -> torch.Tensor:
        hc = self.hc_modules
        layers = (functools.partial(self._layer, L=L, st=st, pre_mixer=hc[2 * i], pre_moe=hc[2 * i + 1])
                  for i, (L, st) in enumerate(zip(self.w.layers, self.state)))
        return schedule.forward(self.inp.x0 if x0 is None else x0, self.cfg.hc, layers, hc[-1], part=self._p)

    def _layer(self, res, pending, L, st, pre_mixer, pre_moe):
        """Layer ``L`` (its weights; ``st`` its state) through the shared schedule."""
        mixer = self._gdn if L["kind"] == "gdn" else self._attn
        return schedule.decoder_layer(res, pending, pre_mixer, functools.partial(mixer, L=L, st=st), pre_moe,
                                      functools.partial(self._moe, L=L))

    def weight_bytes(self) -> int:
        """Bytes of every weight this model reads (each storage once)."""
        out = []
        for m in self.hc_w:
            out += [m["norm"]] + [m[k] for k in ("down", "up") if k in m] + list(m.get("fp8", ()))
        for L in self.w.layers:
            out += [t for k, v in L.items() if k != "kind" for t in _tensors(v)]
        return _unique_bytes(out)
