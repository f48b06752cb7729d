"""Qwen3.8-Flash-Next (architecture ``Qwen4ExpForCausalLM``) for vLLM backends where vLLM's own does not run.

vLLM's own build (``vllm/models/qwen4_exp``) is CUDA and ROCm only and does not even import on the CPU backend.
This is the same text model made of vLLM's own layers wherever vLLM has them: GDN is vLLM's
``QwenGatedDeltaNetAttention``; QSA is ``Qwen3NextAttention``'s projections, norms, rope and output gate around
the indexer's selection and sparse attention (:mod:`r9k.plugin.models.qsa`); MoE is ``Qwen3NextSparseMoeBlock``;
the hyper-connections are vLLM's ``GatedResidual`` or this project's ops (:mod:`r9k.plugin.models.hc`);
embedding and LM head are vLLM's. The block-fp8 dense linears are :mod:`r9k.plugin.quant`'s.

Not here (stated, not faked): the MTP block, the per-layer n-gram embedding (a checkpoint with ``ple_layer_ids``
is refused), the vision tower, MXFP4 experts. The hyper-connection math: docs/semantics.md 3.1-3.3.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from itertools import islice
from typing import Optional

import torch
from torch import nn

from vllm.config import VllmConfig
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.models.qwen3_next import (
    Qwen3NextAttention,
    Qwen3NextDecoderLayer,
    Qwen3NextForCausalLM,
    Qwen3NextModel,
    Qwen3NextSparseMoeBlock,
)
from vllm.model_executor.models.utils import (
    AutoWeightsLoader,
    WeightsMapper,
    extract_layer_index,
    make_layers,
    maybe_prefix,
)
from vllm.models.qwen4_exp.common.hyperconnection import GatedResidual, HyperConnectionConfig
from vllm.sequence import IntermediateTensors

from . import schedule

from . import hc, qsa
from .checkpoint import GDN, QSA, CheckpointError, check_config, check_weights

logger = logging.getLogger("vllm.r9k")


class FlashNextHyperConnection(GatedResidual):
    """vLLM's ``GatedResidual`` (the stock path) with this project's ops where chosen (:mod:`r9k.plugin.models.hc`);
    its halves run in the shared schedule's order (``r9k.plugin.models.schedule.hc_module``)."""

    def __init__(self, config: HyperConnectionConfig, prefix: str, use_combine: bool = True):
        super().__init__(config, role=prefix.rsplit(".", 1)[-1], use_combine=use_combine)
        self.prefix = prefix
        self.ops = hc.HcOps.choose(prefix, config.hc_count, config.hc_lowrank, config.rms_norm_eps)

    def finish_loading(self) -> None:
        if self.ops.fused:
            self._hc_weights = hc.prepare(self, self.ops)

    def combine_norm(self, res: torch.Tensor, block_output: Optional[torch.Tensor],
                     carry: Optional["hc.Folded"]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(streams, xn)``: this project's ``hc_combine_norm``, or the ``carry`` module's combine (``xn`` None)."""
        if self.ops.combine_norm is not None:
            inj = None if block_output is None else hc.injection_logits(carry)
            return self.ops.combine_norm(res, block_output, inj, self.hc_norm.weight)
        if block_output is not None:
            res = hc.fold(carry, res, block_output)
        return res, None

    def input_mix(self, res: torch.Tensor, xn: Optional[torch.Tensor]) -> tuple[torch.Tensor, "hc.Folded"]:
        """``(block input, carry)``: this project's mix op from ``xn``, or vLLM's ``GatedResidual.mix``."""
        if self.ops.mix is None:
            block, vllm_state = GatedResidual.mix(self, res)
            return block, hc.Folded(self, vllm_state=vllm_state)
        if xn is None:
            xn = self._normalize(res)  # vLLM's grouped Gemma norm
        buf, block = self.ops.mix(xn, self._hc_weights)
        L = self.config.hc_lowrank
        return block, hc.Folded(self, inj=buf[:, L: L + self.hc_count])


def _hc_config(config, params_dtype: torch.dtype) -> HyperConnectionConfig:
    return HyperConnectionConfig(hc_count=config.hc_count, hidden_size=config.hidden_size,
                                 params_dtype=params_dtype, hc_lowrank=config.hc_lowrank,
                                 rms_norm_eps=config.rms_norm_eps, hc_per_branch_norm=True)


class QsaIndexerWeights(nn.Module):
    """The QSA indexer's weights (index query/key projection, their Gemma norms)."""

    def __init__(self, config, dtype: torch.dtype):
        super().__init__()
        heads = config.indexer_n_heads + config.indexer_kv_heads
        self.index_qk_proj = nn.Linear(config.hidden_size, heads * config.indexer_head_dim, bias=False, dtype=dtype)
        self.q_layernorm = nn.Module()
        self.q_layernorm.weight = nn.Parameter(torch.zeros(config.indexer_head_dim, dtype=dtype), requires_grad=False)
        self.k_layernorm = nn.Module()
        self.k_layernorm.weight = nn.Parameter(torch.zeros(config.indexer_head_dim, dtype=dtype), requires_grad=False)


class FlashNextDecoderLayer(Qwen3NextDecoderLayer):
    """One layer: hc module -> GDN or QSA -> hc module -> MoE (:func:`r9k.plugin.models.schedule.decoder_layer`)."""

    def __init__(self, vllm_config: VllmConfig, layer_type: str, prefix: str = "") -> None:
        nn.Module.__init__(self)  # the parent's __init__ builds Qwen3-Next's norms, which this layer has none of
        config = vllm_config.model_config.hf_text_config
        self.layer_type = layer_type
        self.layer_idx = extract_layer_index(prefix)
        self.use_attn_reduce_scatter_for_moe = False
        self.layer_scale = False
        if layer_type == GDN:
            self.linear_attn = QwenGatedDeltaNetAttention(config, vllm_config=vllm_config,
                                                          prefix=f"{prefix}.linear_attn",
                                                          gqa_interleaved_layout=False)
        else:
            self.self_attn = Qwen3NextAttention(config, model_config=vllm_config.model_config,
                                                cache_config=vllm_config.cache_config,
                                                quant_config=vllm_config.quant_config,
                                                prefix=f"{prefix}.self_attn")
            self.qsa_key = None
            if getattr(config, "indexer_n_heads", None):
                self.self_attn.indexer = QsaIndexerWeights(config, vllm_config.model_config.dtype)
                self.qsa_key = qsa.build(f"{prefix}.self_attn", self.self_attn, self.self_attn.indexer, config,
                                         vllm_config.cache_config.block_size)
        self.mlp = Qwen3NextSparseMoeBlock(vllm_config=vllm_config, prefix=f"{prefix}.mlp")
        hcc = _hc_config(config, vllm_config.model_config.dtype)
        self.attn_hyper_connection = FlashNextHyperConnection(hcc, f"{prefix}.attn_hyper_connection")
        self.mlp_hyper_connection = FlashNextHyperConnection(hcc, f"{prefix}.mlp_hyper_connection")

    def forward(self, res: torch.Tensor, pending: Optional[tuple], positions: torch.Tensor) -> tuple:
        return schedule.decoder_layer(res, pending, self.attn_hyper_connection,
                                      functools.partial(self._token_mixer, positions=positions),
                                      self.mlp_hyper_connection, self.mlp)

    def _token_mixer(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.layer_type == GDN:
            return self.linear_attn(hidden_states=x)
        if self.qsa_key is None:
            return self.self_attn(positions=positions, hidden_states=x)
        # vLLM's Qwen3NextAttention.forward, its attention replaced by the indexer's selection + sparse attention
        a = self.self_attn
        qkv, _ = a.qkv_proj(x)
        q, k, v, gate = a._project_qkv_gate(qkv, positions)  # vLLM's, or this project's q/k norm + rope
        out = qsa.attention(self.qsa_key, q, k, v, a.indexer.index_qk_proj(x), positions)
        if gate is not None:
            out = out * torch.sigmoid(gate)
        return a.o_proj(out)[0]


class FlashNextModel(nn.Module):
    """Embedding broadcast into the streams, the layers, the final hyper-connection mixer (no final norm)."""

    # Qwen3-Next's stacked-weight mapping, plus the separate GDN input projections this checkpoint keeps.
    hf_to_vllm_mapper = Qwen3NextModel.hf_to_vllm_mapper | WeightsMapper(
        orig_to_new_stacked={
            ".in_proj_qkv": (".in_proj_qkvz", (0, 1, 2)),
            ".in_proj_z": (".in_proj_qkvz", 3),
            ".in_proj_b": (".in_proj_ba", 0),
            ".in_proj_a": (".in_proj_ba", 1),
        }
    )

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_text_config
        check_config(config, vllm_config.model_config.max_model_len)
        if getattr(config, "_name_or_path", None):
            check_weights(config._name_or_path)  # a local block-fp8 checkpoint's scales, before any weight
        if get_pp_group().world_size > 1:
            raise CheckpointError(f"{config._name_or_path}/config.json", "pipeline parallelism: not built for this "
                                  "architecture on this backend")
        self.config = config
        self.hc_count = config.hc_count
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: FlashNextDecoderLayer(vllm_config, config.layer_types[extract_layer_index(prefix)],
                                                 prefix=prefix),
            prefix=f"{prefix}.layers")
        hcc = _hc_config(config, vllm_config.model_config.dtype)
        self.hyper_connection_mixer = FlashNextHyperConnection(hcc, f"{prefix}.hyper_connection_mixer",
                                                               use_combine=False)
        self.aux_hidden_state_layers: tuple[int, ...] = ()

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        x = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
        layers = (functools.partial(layer, positions=positions)
                  for layer in islice(self.layers, self.start_layer, self.end_layer))
        return schedule.forward(x, self.hc_count, layers, self.hyper_connection_mixer)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        loaded = AutoWeightsLoader(self).load_weights(weights, mapper=self.hf_to_vllm_mapper)
        for m in self.modules():
            if isinstance(m, FlashNextHyperConnection):
                m.finish_loading()
        return loaded


class FlashNextForCausalLM(Qwen3NextForCausalLM):
    """The causal LM around :class:`FlashNextModel`; Qwen3-Next's hybrid-cache contract (GDN state shapes,
    dtypes, copy functions) and MoE bookkeeping are inherited unchanged."""

    hf_to_vllm_mapper = WeightsMapper(orig_to_new_prefix={"mtp.": None})

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        nn.Module.__init__(self)
        config = vllm_config.model_config.hf_text_config
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.scheduler_config = vllm_config.scheduler_config
        self.quant_config = vllm_config.quant_config
        self.config = config
        self.model = FlashNextModel(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, prefix=maybe_prefix(prefix, "lm_head"))
        self.logits_processor = LogitsProcessor(config.vocab_size)
        self.make_empty_intermediate_tensors = lambda *a, **k: IntermediateTensors({})
        self.set_moe_parameters()
        # the gated attention's q/k norm + rope: the same adapter as vLLM's Qwen3-Next
        from ..layers import qwen3_next

        for name, mod in self.named_modules():
            if isinstance(mod, Qwen3NextAttention):
                qwen3_next.attach(mod, name)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, **kwargs):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)
