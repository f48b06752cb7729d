"""Block-fp8 linears (the Flash-Next checkpoint's format) served through vLLM's out-of-tree quantization hook.

The checkpoint's GDN ``in_proj_qkvz``/``out_proj`` and attention ``qkv_proj``/``o_proj`` are e4m3 with one fp32
dequant multiplier per 128x128 block (``weight`` + ``weight_scale_inv``, the DeepSeek-V3 layout; docs/semantics.md
1.1 and 3.11); vLLM's ``Fp8LinearMethod`` has no CPU kernel for it. :class:`R9kBlockFp8Config`, registered
under :data:`NAME`, claims such a checkpoint (on the CPU always; elsewhere when the block GEMM is switched on);
its linear method loads the bytes as they are (vLLM's own fp8 parameters, so merged and TP-sharded linears load
as in vLLM) and runs, per call: stock (``R9K_FP8_BLOCK`` unset) dequantize + ``F.linear``;
``R9K_FP8_BLOCK=block`` this project's block GEMM (``r9k.kernels.fp8_block``, counted as ``fp8_block_gemm``);
with ``R9K_FP8_QA=1`` the one-launch GEMM with the activation quant in its A-load (1..16 rows). Every other
linear and the MoE experts stay bf16. :func:`check_checkpoint` refuses a malformed checkpoint before any
weight is read, in one line naming the file and the tensor.
"""
from __future__ import annotations

import functools
import json
import logging
import struct
from pathlib import Path
from typing import Optional

from .dispatch import get_table
from . import report
from ..kernels import ops
from .layers import _common

logger = logging.getLogger("vllm.r9k")

NAME = "r9k_block_fp8"
QUANT_MODULE = "vllm.model_executor.layers.quantization"
BLOCK = 128
#: the vLLM layers (last name component) that the served checkpoint stores as block-fp8
FP8_LAYERS = ("qkv_proj", "o_proj", "in_proj_qkvz", "out_proj")
#: their tensors in the checkpoint (before vLLM stacks q/k/v and qkv/z)
FP8_CHECKPOINT_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj")
GEMM_COUNTER = "fp8_block_gemm"  # calls of this project's block GEMM (variant fp8_block_linears)
QA_OP = "fp8_block_linear"  # variant fp8_block_fused_act_quant
MAX_M = 16  # the one-launch path's rows (r9k.kernels.fp8_block.triton_kernel.MAX_M)


class CheckpointFault(ValueError):
    """One located line: ``file: error[bad-checkpoint]: tensor: why``."""

    def __init__(self, file: str, tensor: str, why: str):
        super().__init__(f"{file}: error[bad-checkpoint]: {tensor}: {why}")
        self.file, self.tensor, self.why = file, tensor, why


# ----------------------------------------------------------------------------------- the checkpoint (no torch)


def is_block_fp8(quant_cfg: Optional[dict]) -> bool:
    """Whether a checkpoint's ``quantization_config`` is the block-fp8 format this method serves."""
    return isinstance(quant_cfg, dict) and quant_cfg.get("quant_method") == "fp8" \
        and quant_cfg.get("weight_block_size") is not None


def _headers(model_dir: Path) -> dict[str, tuple[str, dict]]:
    """tensor name -> (file, {"dtype", "shape"}) from the safetensors headers (8-byte length + JSON; no data)."""
    out: dict[str, tuple[str, dict]] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            head = json.loads(fh.read(n))
        for k, v in head.items():
            if k != "__metadata__":
                out[k] = (str(f), v)
    return out


def check_checkpoint(model_dir: str) -> Optional[CheckpointFault]:
    """For a local block-fp8 checkpoint: the first fault in its fp8 linears (None: servable, or not block-fp8)."""
    d = Path(model_dir)
    cfg_path = d / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        return None
    qc = (cfg.get("text_config") or {}).get("quantization_config") or cfg.get("quantization_config")
    if not is_block_fp8(qc):
        return None
    if list(qc["weight_block_size"]) != [BLOCK, BLOCK]:
        return CheckpointFault(str(cfg_path), "quantization_config.weight_block_size",
                               f"{qc['weight_block_size']}; this method serves 128x128 blocks")
    try:
        heads = _headers(d)
    except (OSError, ValueError, struct.error) as exc:
        return CheckpointFault(str(d), "*.safetensors", f"unreadable header: {exc}")
    for name, (file, meta) in sorted(heads.items()):
        if not name.endswith(".weight"):
            continue
        base = name[: -len(".weight")]
        fp8 = meta.get("dtype") == "F8_E4M3"
        linear = base.rsplit(".", 1)[-1] in FP8_CHECKPOINT_LINEARS
        if fp8 and not linear:
            return CheckpointFault(file, name, "float8_e4m3 in a layer this build serves in bf16 "
                                   f"(block-fp8 here: {', '.join(FP8_CHECKPOINT_LINEARS)})")
        if not fp8:
            continue
        scale = base + ".weight_scale_inv"
        if scale not in heads:
            return CheckpointFault(file, scale, f"missing: {name} is float8_e4m3 {meta.get('shape')} and needs "
                                   "its fp32 block scales")
        shape = meta.get("shape") or []
        want = [-(-shape[0] // BLOCK), -(-shape[1] // BLOCK)] if len(shape) == 2 else None
        sfile, smeta = heads[scale]
        if smeta.get("shape") != want:
            return CheckpointFault(sfile, scale, f"shape {smeta.get('shape')} does not match {name} {shape}: "
                                   f"128x128 blocks need {want}")
        if smeta.get("dtype") != "F32":
            return CheckpointFault(sfile, scale, f"dtype {smeta.get('dtype')}; fp32 block scales expected")
    return None


def quantize_block_fp8(w):
    """A bf16/fp32 weight [N, K] -> (e4m3 [N, K], fp32 dequant multipliers [ceil(N/128), ceil(K/128)]): per
    128x128 block ``s = amax / 448``, ``q = e4m3(w / s)`` (what a block-fp8 checkpoint holds)."""
    import torch
    import torch.nn.functional as F

    n, k = w.shape
    pn, pk = -(-n // BLOCK) * BLOCK, -(-k // BLOCK) * BLOCK
    wf = F.pad(w.float(), (0, pk - k, 0, pn - n)).view(pn // BLOCK, BLOCK, pk // BLOCK, BLOCK)
    s = wf.abs().amax(dim=(1, 3)).clamp_min(1e-12) / 448.0
    q = (wf / s[:, None, :, None]).to(torch.float8_e4m3fn).view(pn, pk)[:n, :k]
    return q.contiguous(), s.contiguous()


# ------------------------------------------------------------------------------------------- vLLM side


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def _gemm_plan():
    table = get_table()
    return table.plans.get("fp8_block_linears") if table is not None else None


def _gemm_wanted() -> bool:
    p = _gemm_plan()
    return p is not None and p.state == "fused"


@functools.cache
def _config_class():
    """The config class, built on first use (it imports only vLLM's ``base_config``: registering it from the
    quantization package's post-import hook meets no half-imported module)."""
    from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

    class R9kBlockFp8Config(QuantizationConfig):
        """The checkpoint's ``quantization_config`` (block-fp8, 128x128) served by the block-fp8 linear method."""

        def __init__(self, weight_block_size: list[int]):
            super().__init__()
            self.weight_block_size = list(weight_block_size)

        def get_name(self) -> str:
            return NAME

        def get_supported_act_dtypes(self) -> list:
            import torch

            return [torch.bfloat16]

        @classmethod
        def get_min_capability(cls) -> int:
            return 0

        @staticmethod
        def get_config_filenames() -> list[str]:
            return []

        @classmethod
        def from_config(cls, config: dict) -> "R9kBlockFp8Config":
            return cls(config.get("weight_block_size") or [BLOCK, BLOCK])

        @classmethod
        def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None) -> Optional[str]:
            if user_quant not in (None, "fp8", NAME) or not is_block_fp8(hf_quant_cfg):
                return None
            return NAME if (_on_cpu() or _gemm_wanted()) else None

        def get_quant_method(self, layer, prefix: str):
            from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod

            if isinstance(layer, LinearBase):
                if prefix.rsplit(".", 1)[-1] in FP8_LAYERS:
                    return _method_class()(self, prefix)
                return UnquantizedLinearMethod()
            return None  # MoE experts and everything else: vLLM's unquantized path

    return R9kBlockFp8Config


def dequant_linear(x, w_q, w_s):
    """The stock path: the weight dequantized per 128x128 block (bf16), then ``F.linear``."""
    import torch
    import torch.nn.functional as F

    n, k = w_q.shape
    s = w_s.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
    return F.linear(x, (w_q.float() * s).to(torch.bfloat16))


@functools.cache
def _method_class():
    import torch
    from vllm.model_executor.layers.linear import LinearMethodBase
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        create_fp8_scale_parameter,
        create_fp8_weight_parameter,
        validate_fp8_block_shape,
    )
    from vllm.model_executor.parameter import BlockQuantScaleParameter

    class R9kBlockFp8LinearMethod(LinearMethodBase):
        """Checkpoint bytes in, bf16 out: stock dequantize + matmul, or this project's block GEMM (module doc)."""

        def __init__(self, config, prefix: str):
            self.config, self.prefix = config, prefix
            self.gemm, self.qa = _choose(prefix)

        def create_weights(self, layer, input_size_per_partition, output_partition_sizes, input_size,
                           output_size, params_dtype, **extra_weight_attrs):
            loader = extra_weight_attrs.get("weight_loader")
            layer.logical_widths = output_partition_sizes
            layer.input_size_per_partition = input_size_per_partition
            layer.output_size_per_partition = sum(output_partition_sizes)
            layer.orig_dtype = params_dtype
            layer.weight_block_size = self.config.weight_block_size
            validate_fp8_block_shape(layer, input_size, output_size, input_size_per_partition,
                                     output_partition_sizes, self.config.weight_block_size)
            layer.register_parameter("weight", create_fp8_weight_parameter(
                layer.output_size_per_partition, input_size_per_partition, loader))
            layer.register_parameter("weight_scale_inv", create_fp8_scale_parameter(
                BlockQuantScaleParameter, output_partition_sizes, input_size_per_partition,
                self.config.weight_block_size, loader))

        def process_weights_after_loading(self, layer) -> None:
            # plain tensors (the loaders are done); contiguous, as the kernels read them
            layer.weight = torch.nn.Parameter(layer.weight.data.contiguous(), requires_grad=False)
            layer.weight_scale_inv = torch.nn.Parameter(layer.weight_scale_inv.data.float().contiguous(),
                                                        requires_grad=False)

        def apply(self, layer, x, bias=None):
            shape = x.shape
            x2 = x.reshape(-1, shape[-1])
            if x2.dtype != torch.bfloat16 or x2.stride(-1) != 1:
                x2 = x2.to(torch.bfloat16).contiguous()
            if self.gemm is None:
                y = dequant_linear(x2, layer.weight, layer.weight_scale_inv)
            else:
                y = self.gemm(x2, layer.weight, layer.weight_scale_inv)
            if bias is not None:
                y = y + bias
            return y.reshape(*shape[:-1], y.shape[-1]).to(x.dtype)

    return R9kBlockFp8LinearMethod


def _choose(prefix: str):
    """(gemm callable or None for stock, whether the one-launch QA path is on) for one layer; records the layer."""
    table, plan = get_table(), _gemm_plan()
    if plan is not None:
        plan.layers += 1
    if plan is None or plan.state != "fused":
        return None, False
    qa = table.choose(QA_OP, layer=prefix) if QA_OP in table.by_op else None
    kop = ops.get(QA_OP)
    fused = qa is not None and qa.state == "fused"
    report.layer(GEMM_COUNTER, prefix, installed=True)
    if fused:
        report.layer(QA_OP, prefix, installed=True)
    elif table.plans.get(table.by_op.get(QA_OP, ""), None) is not None:
        report.layer(QA_OP, prefix, installed=False, reason="R9K_FP8_QA off: the quant runs as its own launch")
    if plan.used is None:
        plan.used = f"r9k.kernels.fp8_block:{GEMM_COUNTER} ({NAME} quantization)"
    return gemm_op(kop.fused if fused else kop.stock, fused), fused


def gemm_op(fn, fused: bool):
    """``fn(x, w_q, w_s) -> y`` behind an opaque torch custom op that counts its calls at execution time."""
    def impl(x, w_q, w_s):
        report.hit(GEMM_COUNTER, "fused")
        if fused:
            report.hit(QA_OP, "fused" if 1 <= x.shape[0] <= MAX_M else f"fallback:rows>{MAX_M}")
        return fn(x, w_q, w_s)

    def fake(x, w_q, w_s):
        return x.new_empty((x.shape[0], w_q.shape[0]))

    return _common.opaque(f"block_fp8_linear_{'qa' if fused else 'two_launch'}",
                          "(Tensor x, Tensor w_q, Tensor w_s) -> Tensor", impl, fake)


def register_config(module) -> None:
    """Register :class:`R9kBlockFp8Config` with vLLM (idempotent; the quantization package's post-import hook)."""
    cls = _config_class()
    if NAME in module.QUANTIZATION_METHODS and module.get_quantization_config(NAME) is cls:
        return
    module.register_quantization_config(NAME)(cls)
    logger.debug("r9k: registered quantization method %s (block-fp8 checkpoints)", NAME)


def install_block_fp8(module) -> None:
    """Adapter ``quantization:r9k_block_fp8`` (registry/adapters.toml, install = "call")."""
    register_config(module)
