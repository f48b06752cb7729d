"""Qwen3-Next's gated full attention (``Qwen3NextAttention``) with this project's q/k norm + rope + gate split
(op ``qk_norm_rope``).

``Qwen3NextAttention`` is a plain ``nn.Module`` with no extension point, so the hook is the model registry
(:mod:`r9k.plugin.layers.models`): :class:`R9kQwen3NextForCausalLM` is vLLM's class, and each eligible attention
layer (:func:`ineligible`) gets a ``_project_qkv_gate`` calling ``torch.ops.r9k.qk_norm_rope``. Same math as
vLLM's eager path, except that the norm and rope run in fp32 with one bf16 rounding per output. An out-of-tree
model with the same attention calls :func:`attach` on its layers.
"""
from __future__ import annotations

import torch
from vllm.model_executor.models.qwen3_next import Qwen3NextAttention, Qwen3NextForCausalLM

from .. import report
from . import _common

OP = "qk_norm_rope"


class _QkState:
    def __init__(self, attn, fn):
        self.attn = attn
        self.fn = fn
        self.cache = None  # bf16 cos/sin cache (made at the first call, after the model moved to its device)
        self.max_rows = _common.max_rows()


def _qk_op():
    def impl(qkv: torch.Tensor, positions: torch.Tensor, key: str) -> tuple[torch.Tensor, torch.Tensor,
                                                                               torch.Tensor]:
        st: _QkState = _common.STATE[key]
        m = st.attn
        if st.max_rows is not None and qkv.shape[0] > st.max_rows:
            report.hit(OP, f"fallback:rows>{st.max_rows}")
            q, k, _v, gate = Qwen3NextAttention._project_qkv_gate(m, qkv, positions)  # vLLM's own path
            return q.clone(), k.clone(), gate.clone()
        rope = m.rotary_emb
        if st.cache is None or st.cache.device != qkv.device:
            st.cache = rope.cos_sin_cache.to(qkv.device, dtype=torch.bfloat16).contiguous()
        section = getattr(rope, "mrope_section", None) if positions.dim() == 2 else None
        report.hit(OP, "fused")
        return st.fn(qkv, m.q_norm.weight, m.k_norm.weight, positions, st.cache, m.num_heads, m.num_kv_heads,
                     m.head_dim, m.q_norm.variance_epsilon,
                     **({"mrope_section": tuple(section)} if section else {}))

    def fake(qkv, positions, key):
        m = _common.STATE[key].attn
        t = qkv.shape[0]
        return (qkv.new_empty((t, m.q_size)), qkv.new_empty((t, m.kv_size)), qkv.new_empty((t, m.q_size)))

    return _common.opaque("qk_norm_rope", "(Tensor qkv, Tensor positions, str key) -> (Tensor, Tensor, Tensor)",
                          impl, fake)


class _AttentionMixin:
    _r9k_key: str

    def _project_qkv_gate(self, qkv, positions):
        if positions.ndim == 2 and not getattr(self.rotary_emb, "mrope_section", None):
            positions = positions[0]
        q, k, gate = self._r9k_op(qkv.contiguous() if qkv.stride(-1) != 1 else qkv, positions, self._r9k_key)
        v = qkv[..., self.q_size * 2 + self.kv_size:]
        return q, k, v, gate


def ineligible(m) -> str:
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm
    from vllm.model_executor.layers.rotary_embedding import MRotaryEmbedding, RotaryEmbedding

    if not m.attn_output_gate:
        return "no output gate (the op splits q and gate)"
    if getattr(m, "dual_chunk_attention_config", None):
        return "dual-chunk attention"
    rope = m.rotary_emb
    if type(rope) is MRotaryEmbedding:
        sec = getattr(rope, "mrope_section", None)
        if not (sec and len(sec) == 3 and getattr(rope, "mrope_interleaved", False)):
            return "MRoPE that is not the interleaved 3-section kind"
    elif type(rope) is not RotaryEmbedding:
        return f"rotary {type(rope).__name__} (plain or interleaved-MRoPE rotary only)"
    if not getattr(rope, "is_neox_style", False):
        return "rotary not neox style"
    if rope.rotary_dim > m.head_dim or rope.rotary_dim % 2:
        return f"rotary dim {rope.rotary_dim}"
    for n in (m.q_norm, m.k_norm):
        if not isinstance(n, GemmaRMSNorm) or n.weight.shape[0] != m.head_dim:
            return "q/k norm is not a Gemma RMS norm of the head size"
        if n.weight.dtype != torch.bfloat16:
            return f"q/k norm weights in {n.weight.dtype}"
    return ""


def attach(m, layer: str) -> None:
    """Give attention module ``m`` this project's q/k norm + rope when chosen and eligible."""
    choice = _common.eligible_choice(OP, layer, lambda: ineligible(m))
    if choice is not None:
        _common.install(OP, layer, m, _QkState(m, choice.fn), _qk_op(), _AttentionMixin)


class R9kQwen3NextForCausalLM(Qwen3NextForCausalLM):
    """vLLM's Qwen3-Next model; its gated-attention layers run this project's q/k norm + rope."""

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        for name, mod in self.named_modules():
            if isinstance(mod, Qwen3NextAttention):
                attach(mod, name)
