"""vLLM's ``QwenGatedDeltaNetAttention`` (Qwen3-Next and Qwen3.5's Gated DeltaNet layer, a ``PluggableLayer``,
installed with ``register_oot``) with this project's GDN decode core (op ``gdn_decode``).

The projections stay vLLM's; between them one opaque custom op, ``torch.ops.r9k.gdn_core``, reads the batch's
GDN metadata: a decode-only batch runs vLLM's own CPU conv update, then the project's kernel (q/k l2-norm,
gates, delta-rule recurrence and gated RMS norm in one launch; ``fused``); any other batch runs vLLM's core and
norm (``fallback:prefill``). At the boundary: one candidate per request (``num_accepted`` = 1, the op being the
speculative-decode core); the state, [Hv, Dk, Dv] to vLLM's CPU kernels and [Hv, Dv, Dk] to the op, is
gathered into a scratch (slot 0: padding) and scattered back transposed; the op's output is already normed.
Eligibility: :func:`ineligible` (the GPU wiring is not written).
"""
from __future__ import annotations

import torch
from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention

from .. import report
from . import _common

OP = "gdn_decode"


class _GdnState:
    def __init__(self, layer, fn):
        self.layer = layer
        self.fn = fn
        self.dt_bias = None  # fp32 copy, made at the first call (after the weights are loaded)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _conv_update(layer, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """vLLM's CPU conv update of the decode tokens (the call vLLM's own CPU GDN core makes)."""
    from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first
    from vllm.model_executor.layers.mamba.ops.cpu import gdn_attention as cpu_gdn
    from vllm.model_executor.layers.mamba.ops.cpu.causal_conv1d import causal_conv1d_update_cpu

    conv_state = layer.kv_cache[0]
    w = layer.conv1d.weight
    if torch.cpu._is_avx512_bf16_supported() or cpu_gdn.is_arm_bf16():  # weights packed at load
        if not is_conv_state_dim_first():
            conv_state = conv_state.transpose(1, 2)
        return cpu_gdn._causal_conv1d_update_cpu(
            x=x, conv_states=conv_state, weight=w, bias=layer.conv1d.bias,
            silu_activation=(layer.activation == "silu"), conv_state_indices=idx, is_weight_packed=True)
    if not is_conv_state_dim_first():
        conv_state = conv_state.transpose(-1, -2)
    return causal_conv1d_update_cpu(x=x, conv_state=conv_state, weight=w.view(w.size(0), w.size(2)),
                                    bias=layer.conv1d.bias, activation=layer.activation, conv_state_indices=idx)


def _decode(st: _GdnState, md, mixed_qkv, z, b, a, out) -> None:
    layer = st.layer
    nd = md.num_decodes
    idx = md.non_spec_state_indices_tensor[:nd]
    cu = md.non_spec_query_start_loc[: nd + 1]
    x = _conv_update(layer, mixed_qkv[:nd].contiguous(), idx)
    ssm = layer.kv_cache[1]  # [slots, Hv, Dv, Dk] as allocated; vLLM's CPU kernels view it as [.., Dk, Dv]
    slots, hv, dv, dk = ssm.shape
    cpu_view = ssm.view(slots, hv, dk, dv)
    valid = idx >= 0
    src = idx.clamp(min=0).long()
    scratch = torch.zeros((nd + 1, hv, dv, dk), dtype=ssm.dtype, device=ssm.device)
    scratch[1:] = cpu_view[src].transpose(-1, -2)
    ours = torch.where(valid, torch.arange(1, nd + 1, dtype=torch.int32, device=idx.device),
                       torch.zeros((), dtype=torch.int32, device=idx.device))[:, None].contiguous()
    if st.dt_bias is None:
        st.dt_bias = layer.dt_bias.detach().float().contiguous()
    hk = layer.num_k_heads // layer.tp_size
    st.fn(x, z[:nd], b[:nd], a[:nd], layer.A_log.detach().float(), st.dt_bias, layer.norm.weight.detach(), scratch,
          cu.to(torch.int32), torch.ones(nd, dtype=torch.int32, device=idx.device), ours, hk, hv,
          layer.head_k_dim, layer.head_v_dim, layer.norm.eps, layer.norm.activation, None, out[:nd])
    keep = valid.nonzero()[:, 0]
    cpu_view[src[keep]] = scratch[1:][keep].transpose(-1, -2).to(ssm.dtype)
    if out.shape[0] > nd:
        out[nd:].zero_()


def _core_op():
    def impl(mixed_qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor, out: torch.Tensor,
             key: str) -> None:
        from vllm.forward_context import get_forward_context
        from vllm.utils.torch_utils import _encode_layer_name

        st: _GdnState = _common.STATE[key]
        layer = st.layer
        md = get_forward_context().attn_metadata
        if md is None:  # profiling run without metadata: vLLM's core leaves zeros, its norm keeps them
            out.zero_()
            return
        md = md[layer.prefix]
        if md.num_actual_tokens == 0:
            out.zero_()
            return
        if md.num_prefills == 0 and md.spec_sequence_masks is None and md.num_decodes > 0:
            report.hit(OP, "fused")
            _decode(st, md, mixed_qkv, z, b, a, out)
            return
        report.hit(OP, "fallback:prefill")
        T = mixed_qkv.shape[0]
        hv, dv = layer.num_v_heads // layer.tp_size, layer.head_v_dim
        core = torch.zeros((T, hv, dv), dtype=mixed_qkv.dtype, device=mixed_qkv.device)
        torch.ops.vllm.cpu_gdn_attention_core(mixed_qkv, b, a, core, _encode_layer_name(layer.prefix))
        out.copy_(layer.norm(core, z.view(T, hv, dv)).reshape(T, hv * dv))

    def fake(mixed_qkv, z, b, a, out, key) -> None:
        return None

    return _common.opaque(
        "gdn_core", "(Tensor mixed_qkv, Tensor z, Tensor b, Tensor a, Tensor(a!) out, str key) -> ()", impl, fake,
        mutates_args=("out",))


def ineligible(layer, vllm_config) -> str:
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return "not the CPU backend (the adapter's GPU wiring is not written; vLLM's GDN core runs)"
    dtype = getattr(getattr(vllm_config, "model_config", None), "dtype", None)
    if dtype != torch.bfloat16:
        return f"model dtype {dtype}, the kernel takes bf16"
    if getattr(vllm_config, "speculative_config", None) is not None:
        return "speculative decoding on the CPU backend (vLLM's spec-aware CPU path and its wide conv buffer)"
    if hasattr(layer, "in_proj_qkv"):
        return "LoRA projections"
    if not (_pow2(layer.head_k_dim) and _pow2(layer.head_v_dim)):
        return f"head dims {layer.head_k_dim}/{layer.head_v_dim} not powers of two"
    if layer.num_v_heads % layer.num_k_heads:
        return "value heads not a multiple of key heads"
    if layer.norm.activation not in ("silu", "sigmoid"):
        return f"output gate {layer.norm.activation!r}"
    return ""


class R9kQwenGatedDeltaNetAttention(QwenGatedDeltaNetAttention):
    """QwenGatedDeltaNetAttention whose decode batches run this project's GDN core."""

    def __init__(self, config, vllm_config, prefix: str = "", *args, **kwargs):
        super().__init__(config, vllm_config, prefix, *args, **kwargs)
        self._r9k_key = None
        choice = _common.eligible_choice(OP, prefix, lambda: ineligible(self, vllm_config))
        if choice is None:
            return
        self._r9k_key = f"{prefix}:{OP}"
        _common.STATE[self._r9k_key] = _GdnState(self, choice.fn)
        self._r9k_op = _core_op()
        _common.installed(OP, prefix)

    def forward_cpu(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self._r9k_key is None:
            return super().forward_cpu(hidden_states)
        T = hidden_states.size(0)
        hv = self.num_v_heads // self.tp_size
        mixed_qkvz, _ = self.in_proj_qkvz(hidden_states)
        ba, _ = self.in_proj_ba(hidden_states)
        if self.gqa_interleaved_layout:  # Qwen3-Next: vLLM's own unpacking of the interleaved layout
            q, k, v, z, b, a = self.fix_query_key_value_ordering(mixed_qkvz, ba)
            mixed_qkv = torch.cat((q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)), dim=-1)
        else:  # Qwen3.5: [q | k | v | z] and [b | a]
            qkv_size = (self.key_dim * 2 + self.value_dim) // self.tp_size
            mixed_qkv, z = mixed_qkvz.split([qkv_size, self.value_dim // self.tp_size], dim=-1)
            b, a = ba.chunk(2, dim=-1)
        z = z.reshape(T, hv * self.head_v_dim).contiguous()
        out = torch.empty((T, hv * self.head_v_dim), dtype=hidden_states.dtype, device=hidden_states.device)
        self._r9k_op(mixed_qkv, z, b, a, out, self._r9k_key)
        output, _ = self.out_proj(out)
        return output
