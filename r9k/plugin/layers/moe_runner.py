"""vLLM's ``MoERunner`` (a ``PluggableLayer``, installed with ``register_oot``) with this project's fused
routing (op ``moe_route``) and shared expert (op ``shared_expert``), both inside opaque torch custom ops.

* **routing**: an eligible router (:func:`routing_ineligible`) gets ``_compute_routing`` from
  :class:`_RouterMixin`: softmax -> top-k -> renormalise as vLLM's, but ties go to the lower expert id and the
  weights come from one fp32 softmax (vLLM's CPU router's carry one bf16 rounding); vLLM's ``_select_experts``
  still applies the EPLB mapping and the id dtype after it.
* **shared expert**: ``sigmoid(x wg) * down(silu(gate(x)) * up(x))`` of a ``Qwen2MoeMLP`` (also Qwen3-Next's)
  (:func:`shared_ineligible`). The kernel reads MXFP4 weights and quantizes activations per row to fp8: a bf16
  layer is converted once, at its first call, and only when that is lossless (the tiny models are built so);
  otherwise it keeps vLLM's path with the reason.
"""
from __future__ import annotations

import torch
from vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner

from .. import report
from . import _common

ROUTE = "moe_route"
SHARED = "shared_expert"


# ------------------------------------------------------------------------------------------ routing


class _RouteState:
    def __init__(self, router, fn):
        self.router = router
        self.fn = fn
        self.vllm_compute = type(router)._compute_routing  # vLLM's own (before the class swap)
        self.max_rows = _common.max_rows()


def _route_op():
    def impl(hidden_states: torch.Tensor, logits: torch.Tensor, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        st: _RouteState = _common.STATE[key]
        r = st.router
        if st.max_rows is not None and logits.shape[0] > st.max_rows:
            report.hit(ROUTE, f"fallback:rows>{st.max_rows}")
            w, ids = st.vllm_compute(r, hidden_states, logits, None)
            return w.to(torch.float32).clone(), ids.to(torch.int32).clone()
        report.hit(ROUTE, "fused")
        return st.fn(logits, r.top_k, bool(getattr(r, "renormalize", True)))

    def fake(hidden_states: torch.Tensor, logits: torch.Tensor, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        k = _common.STATE[key].router.top_k
        m = logits.shape[0]
        return (logits.new_empty((m, k), dtype=torch.float32), logits.new_empty((m, k), dtype=torch.int32))

    return _common.opaque("moe_route", "(Tensor hidden_states, Tensor logits, str key) -> (Tensor, Tensor)",
                          impl, fake)


class _RouterMixin:
    """``_compute_routing`` of an eligible vLLM router: this project's fused softmax + top-k + renorm."""

    _r9k_key: str

    def _compute_routing(self, hidden_states, router_logits, indices_type, *, input_ids=None):
        return self._r9k_op(hidden_states, router_logits, self._r9k_key)


def routing_ineligible(router, quant_method) -> str:
    """Why ``router`` cannot run the fused routing ('' when it can)."""
    name = type(router).__name__
    if name not in ("CPURouter", "FusedTopKRouter"):
        return f"router {name} (only the plain softmax top-k routers are covered)"
    if getattr(router, "scoring_func", "softmax") != "softmax":
        return f"scoring {router.scoring_func!r}, the kernel does softmax"
    if getattr(router, "use_grouped_topk", False):
        return "grouped top-k routing"
    if getattr(router, "e_score_correction_bias", None) is not None:
        return "score-correction bias"
    if getattr(router, "custom_routing_function", None) is not None:
        return "custom routing function"
    if getattr(router, "eplb_state", None) is not None:
        return "EPLB enabled"
    if getattr(router, "routed_scaling_factor", 1.0) != 1.0:
        return f"routed scaling factor {router.routed_scaling_factor}"
    if router.top_k > 16:
        return f"top_k {router.top_k} > 16"
    if router.global_num_experts > 1024:
        return f"{router.global_num_experts} experts > 1024"
    if quant_method is not None and getattr(quant_method, "is_monolithic", False):
        return "monolithic experts (they route inside their own kernel)"
    return ""


def attach_routing(runner, layer: str) -> None:
    """Give ``runner.router`` this project's routing when the table says so and it is eligible."""
    def ineligible() -> str:
        try:
            qm = runner._quant_method
        except Exception:  # noqa: BLE001 - not built yet: judged by the router alone
            qm = None
        return routing_ineligible(runner.router, qm)

    choice = _common.eligible_choice(ROUTE, layer, ineligible)
    if choice is not None:
        _common.install(ROUTE, layer, runner.router, _RouteState(runner.router, choice.fn), _route_op(),
                        _RouterMixin)


# ------------------------------------------------------------------------------------ shared expert


class _SharedState:
    """One shared-expert layer. Under TP the kernel computes this rank's partial sum; the sum over ranks is
    vLLM's all-reduce, where the module's ``down_proj`` does it (``reduce_results``), else the caller's."""

    def __init__(self, module, fn, layer: str):
        self.module = module  # the vLLM MLP
        down = module.down_proj
        self.all_reduce = getattr(down, "tp_size", 1) > 1 and bool(getattr(down, "reduce_results", False))
        self.vllm_forward = type(module).forward  # vLLM's own forward: the fallback inside the op
        self.fn = fn
        self.layer = layer
        self.weights = None  # SharedExpertWeights, made at the first call
        self.reason = ""  # set when the conversion is not lossless
        self.max_rows = _common.max_rows()


def _mxfp4_exact(w: torch.Tensor):
    """(packed, scales) of ``w`` when MXFP4 represents it exactly, else None."""
    from ...kernels.shared_expert.reference import dequant_mxfp4, quantize_mxfp4

    packed, scales = quantize_mxfp4(w.float())
    if not torch.equal(dequant_mxfp4(packed, scales), w.float()):
        return None
    return packed, scales


def _prepare(st: _SharedState) -> None:
    from ...kernels.shared_expert.reference import prepare_shared_expert

    m = st.module
    w1 = _mxfp4_exact(m.gate_up_proj.weight.data)
    w2 = _mxfp4_exact(m.down_proj.weight.data)
    if w1 is None or w2 is None:
        st.reason = "bf16 weights not on the MXFP4 grid (the kernel reads MXFP4; converting would round them)"
        report.relabel(SHARED, st.layer, False, st.reason)
        _common.keep_logged(SHARED, st.layer, st.reason)
        return
    st.weights = prepare_shared_expert(w1[0], w1[1], w2[0], w2[1], m.expert_gate.weight.data.reshape(-1))


def _shared_op():
    def impl(x: torch.Tensor, key: str) -> torch.Tensor:
        st: _SharedState = _common.STATE[key]
        if st.weights is None and not st.reason:
            _prepare(st)
        if st.weights is None:
            report.hit(SHARED, "fallback:weights not MXFP4")
            return st.vllm_forward(st.module, x).clone()
        if st.max_rows is not None and x.shape[0] > st.max_rows:
            report.hit(SHARED, f"fallback:rows>{st.max_rows}")
            return st.vllm_forward(st.module, x).clone()
        report.hit(SHARED, "fused")
        out = st.fn(x.contiguous(), st.weights)
        if st.all_reduce:
            from vllm.distributed import tensor_model_parallel_all_reduce

            out = tensor_model_parallel_all_reduce(out)
        return out

    def fake(x: torch.Tensor, key: str) -> torch.Tensor:
        return torch.empty_like(x)

    return _common.opaque("shared_expert", "(Tensor x, str key) -> Tensor", impl, fake)


class _SharedExpertMixin:
    _r9k_key: str

    def forward(self, x):
        return self._r9k_op(x, self._r9k_key)


def shared_ineligible(m) -> str:
    """Why the shared-expert module ``m`` cannot run the kernel ('' when it can)."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    if type(m).__name__ != "Qwen2MoeMLP":
        return f"shared expert {type(m).__name__} (the adapter covers Qwen2MoeMLP / Qwen3NextMLP)"
    gate = getattr(m, "expert_gate", None)
    if gate is None:
        return "no sigmoid expert gate"
    if type(getattr(m, "act_fn", None)).__name__ != "SiluAndMul":
        return "activation is not SiLU"
    for name, lin in (("gate_up_proj", m.gate_up_proj), ("down_proj", m.down_proj), ("expert_gate", gate)):
        if not isinstance(getattr(lin, "quant_method", None), UnquantizedLinearMethod):
            return f"{name} quantized by {type(lin.quant_method).__name__}"
        if getattr(lin, "bias", None) is not None:
            return f"{name} has a bias"
        if lin.weight.dtype != torch.bfloat16:
            return f"{name} weights in {lin.weight.dtype}"
    if getattr(m.gate_up_proj, "tp_size", 1) != getattr(m.down_proj, "tp_size", 1):
        return "gate_up_proj and down_proj sharded differently"
    H = m.down_proj.weight.shape[0]
    inter = m.down_proj.weight.shape[1]
    if H % 32 or inter % 32:
        return f"H {H} / I {inter} not multiples of 32 (MXFP4 blocks)"
    if tuple(gate.weight.shape) != (1, H):
        return f"expert gate is not Linear(H -> 1) whole on this rank (weight {tuple(gate.weight.shape)})"
    return ""


#: the self-check's bound for the shared expert (relative L2 against stock): one e4m3 step, as the fused form
#: quantizes its own fused silu * up, an activation code may round one step away from stock's (zeros or noise: ~1)
SHARED_REL_L2 = 2.0 ** -3


def _shared_probe(module, rows: int = 4, seed: int = 0) -> tuple:
    """The self-check's arguments at this layer's H and I: random rows and random MXFP4 weights."""
    from ...kernels.shared_expert.reference import prepare_shared_expert, quantize_mxfp4
    from ..selfcheck import randn

    dev = module.down_proj.weight.device
    H, inter = module.down_proj.weight.shape[0], module.down_proj.weight.shape[1]
    g = torch.Generator(device="cpu").manual_seed(seed)
    x, wg = randn(g, rows, H), randn(g, H) / H ** 0.5
    w1 = quantize_mxfp4((randn(g, 2 * inter, H) / H ** 0.5).to(dev))
    w2 = quantize_mxfp4((randn(g, H, inter) / inter ** 0.5).to(dev))
    return (x.to(torch.bfloat16).to(dev),
            prepare_shared_expert(w1[0], w1[1], w2[0], w2[1], wg.to(torch.bfloat16).to(dev)))


def _shared_bound(got, ref):
    from ..selfcheck import default_bound

    return default_bound(got, ref, SHARED_REL_L2)


def attach_shared_expert(module, layer: str) -> None:
    """Give the shared-expert MLP ``module`` this project's kernel when chosen, eligible and self-checked."""
    choice = _common.eligible_choice(SHARED, layer, lambda: shared_ineligible(module),
                                     probe=lambda: _shared_probe(module), bound=_shared_bound)
    if choice is None:
        return
    # keep the plain weights on the CPU backend (converted at the first call; the fallback uses F.linear)
    for lin in (module.gate_up_proj, module.down_proj, module.expert_gate):
        lin._cpu_skip_gemm_dispatch = True
    _common.install(SHARED, layer, module, _SharedState(module, choice.fn, layer), _shared_op(),
                    _SharedExpertMixin)


# ------------------------------------------------------------------------------------------ runner


class R9kMoERunner(MoERunner):
    """MoERunner whose router and shared expert run this project's ops where chosen and eligible."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        prefix = self.layer_name  # e.g. "model.layers.0.mlp.experts"
        attach_routing(self, prefix)
        se = self._shared_experts
        if se is not None:
            base = prefix.rsplit(".", 1)[0] if "." in prefix else prefix
            attach_shared_expert(se._layer, f"{base}.shared_expert")
