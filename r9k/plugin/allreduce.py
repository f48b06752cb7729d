"""The all-reduce variants where vLLM all-reduces: the device communicator of the CPU backend.

Adapter ``device_communicator:cpu``, op ``allreduce`` (``r9k.kernels.allreduce``), switched by
``p2p_allreduce_hook`` and tuned by the comm area's thresholds (:data:`MODIFIERS`), read from the resolved set.
:func:`install_cpu` makes ``CpuPlatform.get_device_communicator_cls`` (vLLM's only extension point for the
communicator short of a whole platform plugin) name :class:`R9kCpuCommunicator`, a ``CpuCommunicator`` that
overrides only ``all_reduce``. A gloo tensor-parallel group of 2+ ranks runs each call through the opaque custom
op ``torch.ops.r9k.allreduce``: the size rule (:meth:`Config.choose`) picks a reference schedule of
:mod:`r9k.kernels.allreduce.algorithms` or leaves the message to vLLM (counters ``fused:<schedule>``,
``fallback:<why>``). With the self-check on, the first :data:`CHECK_CALLS` calls of each schedule are compared
with vLLM's stock result (``checked:``/``check-failed:``); a failure turns the schedule off, on every rank alike.
Why the check is what it is (vLLM's CPU transports round differently by build): notes/allreduce.md.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from .layers._common import opaque
from . import dispatch, report, selfcheck
from ..registry.manifest import Impl

logger = logging.getLogger("vllm.r9k")

OP = "allreduce"
SWITCH = "p2p_allreduce_hook"
#: the variants the size rule reads (registry area comm; their implementation names this module's adapter)
MODIFIERS = ("ar_scratch_mb", "ar2_compressed", "ar2_compressed_bits", "ar2_compressed_min_kb", "arn_oneshot_cap",
             "arn_max_kb", "ar4_compressed", "ar4_bits", "ar4_max_mb")
STOCK_CPU = "vllm.distributed.device_communicators.cpu_communicator.CpuCommunicator"
OURS = f"{__name__}.R9kCpuCommunicator"
#: calls per schedule and process that the in-server check compares with vLLM's stock all-reduce
CHECK_CALLS = 64
_LABEL = "reference algorithm over gloo (CPU backend)"

#: vLLM group name -> its hook (the custom op finds the group by the name it is called with)
HOOKS: dict[str, "Hook"] = {}


class InstallError(RuntimeError):
    pass


def install_cpu(module) -> None:
    """Adapter of ``device_communicator:cpu``: vLLM's CPU platform names :class:`R9kCpuCommunicator` as its
    device communicator (idempotent; refuses when another plugin changed the answer already)."""
    cls = module.CpuPlatform
    current = cls.get_device_communicator_cls()
    if current == OURS:
        return
    if current != STOCK_CPU:
        raise InstallError(f"CpuPlatform already names the device communicator {current}; not replacing it")
    cls.get_device_communicator_cls = classmethod(lambda _cls: OURS)
    logger.debug("r9k: CpuPlatform's device communicator is %s", OURS)


def config_from(rs, world: int):
    """``(Config, reason)`` of this group from the resolved set ``rs`` at this TP size; a non-empty ``reason``:
    the group keeps vLLM's path."""
    from ..kernels.allreduce import algorithms

    def val(vid: str) -> Optional[str]:
        try:
            return rs.value(vid)
        except KeyError:
            return None

    def knob(vid: str) -> str:
        r = rs.items.get(vid)
        return r.variant.knob if r is not None else vid

    def num(vid: str) -> Optional[int]:
        v = val(vid)
        return None if v in (None, "") else int(v)

    if val(SWITCH) != "1":
        return algorithms.Config(enabled=False), f"{knob(SWITCH)}={val(SWITCH)}: vLLM's all-reduce"
    kw = dict(enabled=True, ar2_compressed=val("ar2_compressed") == "1", ar4_compressed=val("ar4_compressed") == "1")
    fields = {"ar_scratch_mb": "two_rank_max_mb", "ar2_compressed_bits": "ar2_bits", "ar2_compressed_min_kb": "ar2_min_kb",
              "arn_oneshot_cap": "oneshot_kb", "arn_max_kb": "max_kb", "ar4_bits": "ar4_bits", "ar4_max_mb": "ar4_max_mb"}
    # the thresholds the size rule reads at this TP size; one without a value here is not invented
    need = ["ar_scratch_mb"] if world == 2 else ["arn_oneshot_cap", "arn_max_kb"]
    if world == 2 and kw["ar2_compressed"]:
        need += ["ar2_compressed_bits", "ar2_compressed_min_kb"]
    if world == 4 and kw["ar4_compressed"]:
        need += ["ar4_bits", "ar4_max_mb"]
    for vid, field in fields.items():
        n = num(vid)
        if n is not None:
            kw[field] = n
        elif vid in need:
            return algorithms.Config(enabled=False), f"{knob(vid)} has no value at TP {world}: vLLM's all-reduce"
    return algorithms.Config(**kw), ""


def stock_reason(cfg, nbytes: int, world: int) -> str:
    """Why the size rule left a message of ``nbytes`` to vLLM (the counter's ``fallback:`` path): its size class."""
    if world == 2:
        return f"size>{cfg.two_rank_max_mb}MiB"
    if world == 4 and cfg.ar4_compressed:
        return f"size>{cfg.ar4_max_mb}MiB"
    return f"size>{cfg.max_kb}KB" + ("" if world == 4 else f" (no compressed schedule at {world} ranks)")


class Hook:
    """One tensor-parallel group's all-reduce: the schedule for each message, its counters and the check."""

    FLOATS = ("torch.float32", "torch.bfloat16", "torch.float16")

    def __init__(self, name: str, group, world: int, cfg, stock: Callable, check: bool):
        self.name, self.group, self.world, self.cfg, self.stock = name, group, world, cfg, stock
        self.check = check
        self.off: dict[str, str] = {}  # schedule -> why it no longer runs in this process
        self.said_rounding = False

    def _stock(self, x, why: str):
        report.hit(OP, f"fallback:{why}")
        y = x.clone()  # the custom op returns a new tensor; vLLM's CPU all-reduce works in place
        return self.stock(y)

    def run(self, x):
        from ..kernels.allreduce import algorithms

        if str(x.dtype) not in self.FLOATS:
            return self._stock(x, f"dtype {str(x.dtype).replace('torch.', '')}")
        nbytes = x.numel() * x.element_size()
        kind = self.cfg.choose(nbytes, self.world)
        if kind == "stock":
            return self._stock(x, stock_reason(self.cfg, nbytes, self.world))
        if kind in self.off:
            return self._stock(x, "check failed")
        xc = x.contiguous()
        _, out = algorithms.all_reduce(xc, self.cfg, self.group)
        if self.check and report.calls(OP, f"checked:{kind}") < CHECK_CALLS:
            bad = self.verify(kind, xc, out)  # a collective: stock's all-reduce on a copy
            # counted after the check, together: the status flusher (another thread) never sees the call
            # fused for the length of a collective without its check
            report.hit(OP, f"fused:{kind}")
            report.hit(OP, f"checked:{kind}")
            if bad:
                report.hit(OP, f"check-failed:{kind}")
                self.off[kind] = bad
                logger.warning("r9k: %s: %s on %s: %s; this size class runs vLLM's all-reduce from now on",
                               OP, kind, self.name, bad)
                return self.stock(xc.clone())  # this call too: vLLM's result, on every rank
        else:
            report.hit(OP, f"fused:{kind}")
        return out.view_as(x)

    def verify(self, kind: str, x, out) -> str:
        """Empty when ``out`` is within its stated bound of vLLM's stock result, else what is wrong (a
        collective: every rank calls it for the same calls)."""
        import torch

        from ..kernels.allreduce import algorithms, quant, reference

        ref = self.stock(x.clone())
        if kind in ("one_shot", "two_shot"):
            xs = algorithms._gather(x, self.group)
            if self.world == 2:
                return self._two_ranks(out, ref, xs)
            lim = reference.exact_schedule_bound(xs, x.dtype)
            err = (out.double() - reference.exact_sum(xs)).abs()
            fin = torch.stack([t.isfinite() for t in xs]).all(0)
            ok = (err <= lim) | ~fin
            if bool(ok.all()):
                return ""
            return f"{int((~ok).sum())} element(s) outside the fp32 accumulation bound of the fp64 sum"
        bits = self.cfg.ar2_bits if kind == "compressed_one_shot" else self.cfg.ar4_bits
        block = self.cfg.block
        xs = algorithms._gather(x, self.group)
        errs = reference.block_errors(out, xs, block)
        bound = reference.error_bound(xs, kind, bits, block, x.dtype)
        # a block with a non-finite input, or values whose fp32 rotation overflows, has no finite bound
        # (vLLM's profiling run reduces uninitialised memory, which holds such values)
        fin = torch.stack([quant.to_blocks(t, block).isfinite().all(1) for t in xs]).all(0) & bound.isfinite()
        ok = (errs <= bound) | ~fin
        if bool(ok.all()):
            return ""
        worst = float((errs[~ok] / bound[~ok].clamp_min(1e-300)).max())
        return f"{int((~ok).sum())} block(s) outside the stated L2 bound (worst {worst:.3g}x the bound)"

    def _two_ranks(self, out, ref, xs) -> str:
        """The 2-rank check: ``out`` is the fp32 sum ``x0 + x1`` rounded to nearest even, bit for bit, and
        vLLM's ``ref`` a rounding of the same sum (:func:`roundings`)."""
        import torch

        s = xs[0].float() + xs[1].float()  # one fp32 addition: the same bits in either order, on every rank
        nearest, other = roundings(s, out.dtype)
        nan = s.isnan()
        ours = (out == nearest) | (nan & out.isnan())
        if not bool(ours.all()):
            return (f"{int((~ours).sum())} of {out.numel()} elements are not the fp32 sum rounded to nearest "
                    "(the one-shot's result at 2 ranks)")
        flushed = (ref == 0) & (s.abs() < torch.finfo(out.dtype).tiny)  # vcvtneps2bf16 flushes subnormals
        theirs = (ref == nearest) | (ref == other) | flushed | (nan & ref.isnan())
        if not bool(theirs.all()):
            return (f"{int((~theirs).sum())} of {out.numel()} elements differ from vLLM's all-reduce by more than "
                    "its rounding (expected a rounding of the same fp32 sum at 2 ranks)")
        apart = int((ref != out).sum()) - int((nan & ref.isnan()).sum())
        if apart and not self.said_rounding:
            self.said_rounding = True  # once per group: how this machine's vLLM transport rounds
            logger.info("r9k: %s on %s: vLLM's all-reduce rounds %d of %d elements of a call the other way (one "
                        "step of %s, or a subnormal flushed to 0): its CPU transport does not round to nearest",
                        OP, self.name, apart, out.numel(), out.dtype)
        return ""


def roundings(s, dtype):
    """``(nearest, other)``: the two values of ``dtype`` that bracket each fp32 value of ``s``: ``nearest`` the
    round-to-nearest-even one (what ``s.to(dtype)`` gives), ``other`` the adjacent value of ``dtype`` on the
    other side of ``s`` (equal to ``nearest`` where ``s`` is exact in ``dtype``, infinite or NaN). Any rounding
    of ``s`` to ``dtype`` (to nearest, toward zero, up, down) is one of the two; vLLM's CPU transports each
    round the fp32 sum one of these ways by build (notes/allreduce.md)."""
    nearest = s.to(dtype)
    if dtype.itemsize != 2:  # fp32: the sum itself, nothing to round
        return nearest, nearest
    import torch

    bits = nearest.view(torch.int16)  # sign and magnitude: +-1 on the bits steps the magnitude by one value
    farther = s.double().abs() > nearest.double().abs()
    exact = (s.double() == nearest.double()) | ~s.isfinite()
    step = torch.where(farther, 1, -1).to(torch.int16)
    other = torch.where(exact, bits, bits + step).view(dtype)
    return nearest, other


def _impl(x, group: str):
    return HOOKS[group].run(x)


def _fake(x, group: str):
    return x.new_empty(x.shape)


def torch_op():
    """``torch.ops.r9k.allreduce(x, group_name)`` (defined once per process)."""
    return opaque(OP, "(Tensor x, str group) -> Tensor", _impl, _fake)


def attach(name: str, device_group, world: int, stock: Callable) -> Optional[Hook]:
    """The hook of vLLM's group ``name``, made when vLLM builds its communicator (None: vLLM's path, the reason
    recorded for a tensor-parallel group)."""
    table = dispatch.get_table()
    if table is None or world < 2 or not name.startswith("tp"):
        return None
    plan = table.plans.get(SWITCH)
    if plan is None or plan.state is Impl.STOCK or plan.state is Impl.UNSET:
        return None
    layer = f"group {name} ({world} ranks)"
    if plan.state is not Impl.FUSED:
        report.layer(OP, layer, False, plan.reason or f"{plan.knob}={plan.value}: vLLM's all-reduce")
        return None
    import torch.distributed as dist

    backend = str(dist.get_backend(device_group))
    if backend != "gloo":
        report.layer(OP, layer, False, f"device group backend {backend}, not gloo (the GPU transport is not written)")
        return None

    cfg, why = config_from(report.active_set(), world)
    if why:
        report.layer(OP, layer, False, why)
        return None
    choice = table.choose(OP, layer=layer)
    if choice is None:  # the op did not load: a fallback the table already reported
        report.layer(OP, layer, False, table.plans[SWITCH].reason)
        return None
    plan.used = f"r9k.kernels.allreduce {_LABEL}: {describe(cfg, world)}"
    for vid in MODIFIERS:  # the thresholds and widths: read by the size rule of this group
        p = table.plans.get(vid)
        if p is not None and p.state is Impl.FUSED:
            p.used = f"r9k.kernels.allreduce size rule of {layer} ({_LABEL})"
    if table.on_change:
        table.on_change(table)
    torch_op()
    hook = Hook(name, device_group, world, cfg, stock, selfcheck.enabled(table.strict))
    HOOKS[name] = hook
    report.layer(OP, layer, True)
    logger.info("r9k: all-reduce of %s: %s", layer, describe(cfg, world))
    return hook


def describe(cfg, world: int) -> str:
    """The size classes of ``cfg`` at ``world`` ranks, as the status shows them."""
    if world == 2:
        if cfg.ar2_compressed:
            return (f"one_shot below {cfg.ar2_min_kb} KB, compressed_one_shot {cfg.ar2_bits}-bit from {cfg.ar2_min_kb} KB; "
                    "stock: none")
        return f"one_shot up to {cfg.two_rank_max_mb} MiB; stock above"
    parts = [f"one_shot up to {cfg.oneshot_kb} KB", f"two_shot up to {cfg.max_kb} KB"]
    if world == 4 and cfg.ar4_compressed:
        parts.append(f"hier4 {cfg.ar4_bits}-bit up to {cfg.ar4_max_mb} MiB")
    return ", ".join(parts) + "; stock above"


def _communicator_class():
    from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator

    class R9kCpuCommunicator(CpuCommunicator):
        """vLLM's ``CpuCommunicator`` with this project's all-reduce on tensor-parallel groups (module doc)."""

        def __init__(self, cpu_group, device=None, device_group=None, unique_name: str = "", use_all2all: bool = False):
            super().__init__(cpu_group, device, device_group, unique_name, use_all2all=use_all2all)
            self._r9k = None
            try:
                self._r9k = attach(unique_name, self.device_group, self.world_size, super().all_reduce)
            except Exception as exc:  # noqa: BLE001 - a hook that cannot attach leaves vLLM's path, said once
                report.layer(OP, f"group {unique_name}", False, f"hook failed: {type(exc).__name__}: {exc}")
                logger.warning("r9k: %s: the all-reduce hook of %s failed (%s: %s); vLLM's all-reduce",
                               OP, unique_name, type(exc).__name__, exc)

        def all_reduce(self, input_):
            if self._r9k is None:
                return super().all_reduce(input_)
            return torch_op()(input_, self.unique_name)

    R9kCpuCommunicator.__module__ = __name__
    R9kCpuCommunicator.__qualname__ = "R9kCpuCommunicator"
    return R9kCpuCommunicator


def __getattr__(name: str):
    """``R9kCpuCommunicator`` is built on first use, so that importing this module imports no vLLM."""
    if name == "R9kCpuCommunicator":
        cls = _communicator_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
