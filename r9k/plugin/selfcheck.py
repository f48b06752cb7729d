"""The startup self-check: each installed kernel runs once, at its layer's real shapes, against its stock path.

A gate proves a kernel on the machine it ran on; the self-check proves, in the running server, that the kernel
still computes what its stock path does. It runs where a layer takes its choice
(:func:`r9k.plugin.layers._common.eligible_choice`): the adapter's ``probe`` gives the op's arguments at this
layer's shapes (fresh random values: the weights are not loaded yet), cached per op and shapes. It runs in strict
mode and when ``envvars.SELFCHECK`` is 1 (0: never). A failure refuses the start in strict mode; otherwise the
layer keeps vLLM's path, the plan becomes a fallback with the reason, and one warning is logged.

The bound (:func:`default_bound`): per output tensor, a relative L2 error of at most one rounding step of its
dtype (:data:`REL_L2`), the accuracy class of the tolerance gates: it refuses zeros, noise or a 1% error, and
nothing a correct kernel produces at these sizes. An op that is looser passes its own bound.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

from ..registry import envvars
from . import dispatch
from .startup import StartupError
from ..kernels import ops

logger = logging.getLogger("vllm.r9k")

#: (op, argument signature) -> None (passed) or the failure; one run per op and shapes per process
_RESULTS: dict[tuple, Optional[str]] = {}
#: seconds spent in checks, per op (read by the cost measurement and the status)
SPENT: dict[str, float] = {}

#: relative L2 error allowed per output dtype (one rounding step of the format; see the module doc)
REL_L2 = {"torch.bfloat16": 2.0 ** -8, "torch.float16": 2.0 ** -11, "torch.float32": 2.0 ** -20}


def enabled(strict: bool) -> bool:
    """Whether the self-check runs in this process: strict mode or ``envvars.SELFCHECK`` = 1 (= 0: never)."""
    flag = envvars.SELFCHECK.get()
    if flag is not None and flag.strip() != "":
        return flag.strip() not in ("0", "false", "no", "off")
    return bool(strict)


def _tensors(x: Any) -> list:
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _tensors(item)]
    return [x] if hasattr(x, "shape") and hasattr(x, "dtype") else []


def _signature(args: tuple) -> tuple:
    """Each probe argument by shape and dtype; an object holding tensors by its type and their shapes, never
    their values (the cache key and the error line)."""
    def one(t):
        if hasattr(t, "shape"):
            return (tuple(t.shape), str(t.dtype))
        fields = getattr(t, "__dict__", None) or {}
        shapes = [f"{k}={'x'.join(map(str, v.shape))}" for k, v in fields.items() if hasattr(v, "shape")]
        return f"{type(t).__name__}({', '.join(shapes)})" if shapes else repr(t)[:80]
    return tuple(one(t) for t in args)


def default_bound(got: Any, ref: Any, limit: Optional[float] = None) -> Optional[str]:
    """None when every output tensor of ``got`` is within the relative L2 bound of ``ref``'s (module doc);
    ``limit``: an op's own bound in place of the output dtype's rounding step."""
    gs, rs = _tensors(got), _tensors(ref)
    if len(gs) != len(rs):
        return f"{len(gs)} output tensor(s), stock gives {len(rs)}"
    for i, (g, r) in enumerate(zip(gs, rs)):
        which = f"output {i}: " if len(gs) > 1 else ""
        if tuple(g.shape) != tuple(r.shape):
            return f"{which}shape {tuple(g.shape)}, stock {tuple(r.shape)}"
        g64, r64 = g.double(), r.double()
        finite = r64.isfinite()
        if not bool((g64.isfinite() | ~finite).all()):
            return f"{which}non-finite values where stock is finite"
        den = float(r64[finite].norm())
        err = float((g64[finite] - r64[finite]).norm())
        limit_ = limit if limit is not None else REL_L2.get(str(r.dtype), 2.0 ** -8)
        rel = err / den if den > 0 else err
        if not rel <= limit_:
            return f"{which}relative L2 error {rel:.3g} against stock > {limit_:.3g} ({r.dtype})"
    return None


def check(op: str, fused: Callable, stock: Callable, args: tuple,
          bound: Optional[Callable[[Any, Any], Optional[str]]] = None) -> Optional[str]:
    """Run ``fused`` and ``stock`` once on ``args`` (each on its own copy); None when within ``bound``, else
    the failure (an exception of the fused kernel is a failure too). Cached per op and argument shapes."""
    import torch

    key = (op, _signature(args))
    if key in _RESULTS:
        return _RESULTS[key]
    t0 = time.perf_counter()

    def copy(a):
        return a.clone() if isinstance(a, torch.Tensor) else a

    with torch.no_grad():
        ref = stock(*[copy(a) for a in args])
        try:
            got = fused(*[copy(a) for a in args])
        except Exception as exc:  # noqa: BLE001 - a kernel that raises on its probe fails the check
            got, why = None, f"the kernel raised {type(exc).__name__}: {exc}"
        else:
            why = (bound or default_bound)(got, ref)
    SPENT[op] = SPENT.get(op, 0.0) + time.perf_counter() - t0
    _RESULTS[key] = why
    return why


def verify(choice, layer: str, probe: Callable[[], tuple],
           bound: Optional[Callable[[Any, Any], Optional[str]]] = None) -> Optional[str]:
    """The hook (:func:`r9k.plugin.layers._common.eligible_choice`): None when the check passed or does not run
    here; else the reason the layer keeps vLLM's path. Raises StartupError in strict mode."""
    table = dispatch.get_table()
    strict = bool(table is not None and table.strict)
    if choice.state != "fused" or not enabled(strict):
        return None

    args = probe()
    why = check(choice.op, choice.fn, ops.get(choice.op).stock, args, bound)
    if why is None:
        return None
    shapes = ", ".join("x".join(map(str, s)) if isinstance(s, tuple) else str(s)
                       for s, *_ in (x if isinstance(x, tuple) else (x,) for x in _signature(args)))
    line = f"op {choice.op} ({choice.used}), layer {layer}, probe [{shapes}]: {why}"
    if strict:
        raise StartupError([f"error[self-check]: {line} (strict mode)"],
                           "r9k: a kernel fails its startup self-check against its stock path; refusing to start vLLM")
    reason = f"self-check failed: {why}"
    plan = table.plans.get(choice.variant_id) if table is not None else None
    if plan is not None and plan.state == "fused":
        from ..registry.manifest import Impl  # the enum member: plan_counts and the status compare by identity

        plan.state, plan.reason = Impl.FALLBACK, reason
        if table.on_change:
            table.on_change(table)
    if (choice.op, "warned") not in _RESULTS:
        _RESULTS[(choice.op, "warned")] = why
        logger.warning("r9k: self-check: %s; this op keeps vLLM's own path", line)
    return reason


def summary() -> str:
    """One line: what was checked and what it cost (for the log and notes/evidence.md)."""
    ran = [k for k in _RESULTS if k[1] != "warned"]
    failed = [k[0] for k in ran if _RESULTS[k]]
    return (f"self-check: {len(ran)} probe(s) of {len({k[0] for k in ran})} op(s) in "
            f"{1000 * sum(SPENT.values()):.0f} ms" + (f"; failed: {', '.join(sorted(set(failed)))}" if failed else ""))


def probe_linear(weight, rows: int = 4, seed: int = 0) -> tuple:
    """Arguments of a ``y = x @ w.T`` op at a layer's shapes: ``rows`` random rows and a random weight of its
    shape and dtype."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    out_f, in_f = weight.shape[0], weight.shape[-1]
    x = randn(gen, rows, in_f).to(weight.dtype).to(weight.device)
    w = (randn(gen, out_f, in_f) / in_f ** 0.5).to(weight.dtype)
    return x, w.to(weight.device)


def randn(gen, *shape):
    """fp32 normal values from the CPU generator ``gen``, on the CPU whatever default device vLLM's model
    construction set (a CPU generator on CUDA is an error)."""
    import torch

    return torch.randn(shape, generator=gen, dtype=torch.float32, device="cpu")


def _reset_for_tests() -> None:
    _RESULTS.clear()
    SPENT.clear()
