"""The decode-step benchmark: builds the model per profile, checks agreement, times one CUDA-graph step.

Input is a *plan* (:func:`build_plan`, plain JSON so the GPU host needs no registry code). Per request count:
the gated check (:class:`ShadowChooser`: every fused op against its stock implementation in situ, within
``OP_TOL``), reported whole-step comparisons, launch sites of an eager step and, on CUDA, graph nodes and
replay times. ``python -m r9k.r9kctl.decode_step.run --plan plan.json [--out result.json]`` runs a plan.
"""
from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import sys
import time
from dataclasses import replace
from typing import Optional, Sequence

import torch

from ...kernels import ops
from ...registry import fileio
from ...kernels._triton import launches as counter
from .config import get_config
from .dispatch import (REAL_VLLM_OPS, STEP_OPS, STOCK_KINDS, STOCK_SOURCE, Pick, describe, real_ops_values,
                       values_chooser)
from .model import DecodeStepModel, StepInputs, Weights
from .report import render

#: Default in-situ tolerance for an op without an entry in OP_TOL (the loosest bound among the gates:
#: shared expert 3.6, within 3% relative L2 of stock); also the tiny model's whole-step bound in the tests.
IMPL_TOL = 3e-2

#: In-situ agreement of each fused op with its stock implementation on the same inputs (the model's own
#: activations at every call), relative L2 of each output, from the op's gate (docs/semantics.md):
OP_TOL = {
    "fp8_block_linear": 1e-5,  # 3.11: fused-quant vs two-launch rel L2 < 1e-5
    "hc_mix": 1e-2,  # 3.1: bf16 flips from summation order only (rare, 1 ulp)
    "hc_mix_fp8": 2e-2,  # 3.3: rel L2 < 2e-2 against the dequantised reference
    "router_gemm": 1e-2,  # 3.4: <= 0.2% bf16 flips
    "moe_route": 1e-2,  # 3.5: weights within 2e-6 abs, ids equal except near-ties
    "qsa_glue": 1e-2,  # 3.7: bit-equal except < 1e-3 of elements
    "qk_norm_rope": 2e-2,  # 3.8: relative max error < 2e-2
    "gdn_decode": 1e-2,  # 3.10: <= 0.3% of elements differ, each by <= 2^-6 relative
    "shared_expert": 3e-2,  # 3.6: within 3% relative L2 of stock
    "hc_combine_norm": 1e-2,  # 3.2: out bit-equal except fma flips; y one bf16 rounding
}

#: Variants that change what the model holds without being an op.
MEMORY_ONLY = {"hc_free_bf16"}
#: Variants that change how the model's kernels launch without being an op.
LAUNCH_FLAGS = {"programmatic_dependent_launch"}


def profile_entry(reg, rs) -> dict:
    from ...registry.memory import cost_if_toggled

    mem = {}
    for r in rs.items.values():
        v = r.variant
        if v.memory is None or not (v.memory.formula or v.memory.bytes_per_gpu):
            continue
        c = cost_if_toggled(reg, rs, v.id)
        m = re.search(r"x\s*([\d,]+)\s*modules", v.memory.basis or "")
        modules = int(m.group(1).replace(",", "")) if m else None
        if modules is None and "hc_" in (v.memory.formula or ""):  # a formula over the model's hc modules
            modules = reg.models[rs.model].dims.get("hc_modules") if rs.model in reg.models else None
        mem[v.id] = {"bytes": c.bytes if c else v.memory.for_tp(rs.tp), "basis": v.memory.basis,
                     "modules": modules, "knob": v.knob}
    return {
        "hash": rs.hash,
        "values": {vid: r.value for vid, r in sorted(rs.items.items())},
        "non_stock": [{"id": r.variant.id, "knob": r.variant.knob, "value": r.value, "stock": r.variant.stock}
                      for r in sorted(rs.non_stock(), key=lambda r: r.variant.id) if r.variant.stock is not None],
        "memory": mem,
    }


def baseline(label: str) -> tuple[str, str, dict]:
    """``(profile, stock kind, knob overrides)`` of a baseline label: ``P`` or ``P@vllm`` (stock paths run vLLM's
    own kernels), ``P@plain`` (the op table's plain compositions); ``vllm`` alone is ``stock@vllm``;
    ``P+KNOB=VALUE`` (repeatable) the profile with knobs overridden (e.g. ``tp4-default+R9K_PDL=1``)."""
    if label == "vllm":
        return "stock", "vllm", {}
    label, *overrides = label.split("+")
    sets = {}
    for o in overrides:
        knob, eq, value = o.partition("=")
        if not eq or not knob:
            raise ValueError(f"baseline override {o!r}: expected KNOB=VALUE")
        sets[knob] = value
    name, _, kind = label.partition("@")
    kind = kind or "vllm"
    if kind not in STOCK_KINDS:
        raise ValueError(f"baseline {label!r}: the stock kind after '@' must be one of {', '.join(STOCK_KINDS)}")
    return name, kind, sets


def build_plan(reg, profile: str, against, requests: list[int], context: int, ablate: bool,
               config: str = "flash-next-tp4", replays: int = 50, ablate_requests: Optional[int] = None,
               sets: Optional[dict] = None) -> tuple[dict, list]:
    """Returns ``(plan, diagnostics)``; diagnostics non-empty means a profile did not resolve. ``against``: a
    baseline label, a comma-separated list of them, or a list (see :func:`baseline`)."""
    from ...registry.resolve import resolve

    if isinstance(against, str):
        against = [a.strip() for a in against.split(",") if a.strip()]
    against = list(against or [])
    profs, diags = {}, []
    for label in [profile] + against:
        name, kind, extra = baseline(label) if label != profile else (profile, "vllm", {})
        rs = resolve(reg, name, sets={**(sets or {}), **extra})
        if not rs.ok:
            diags += rs.diagnostics
            continue
        profs[label] = dict(profile_entry(reg, rs), profile=name, stock=kind)
    plan = {"schema": "r9k-decode-step-plan/2", "profile": profile, "against": against, "requests": requests,
            "context": context, "config": config, "ablate": ablate,
            "ablate_requests": ablate_requests or requests[0], "replays": replays, "profiles": profs}
    return plan, diags


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.double(), b.double()
    return float((a64 - b64).norm() / b64.norm().clamp_min(1e-300))


def stock_impl_chooser(values):
    """The same variant values (so the same weight formats), every op at its stock implementation."""
    base = values_chooser(values, stock="plain")

    def choose(op: str) -> Pick:
        p = base(op)
        # keep "fused" on hc_mix_fp8 as the *format* switch (fp8 copies) while running its stock code
        impl = p.impl if op == "hc_mix_fp8" else "stock"
        return replace(p, impl=impl, fn=ops.get(op).stock, via="stock-impl")

    return choose


class ShadowChooser:
    """Wraps a chooser: every fused op, at every call, also runs its stock implementation on copies of its
    tensor inputs and records the relative L2 difference of each floating-point output (max over calls).
    The fused result is what the step continues with. ``stats``: op -> {"max_rel_l2", "calls"}."""

    def __init__(self, base):
        self.base = base
        self.stats: dict = {}

    def __call__(self, op: str) -> Pick:
        p = self.base(op)
        if not p.fused:
            return p
        stock, fused = ops.get(op).stock, p.fn
        st = self.stats.setdefault(op, {"max_rel_l2": 0.0, "calls": 0})

        def clone(a):
            return a.clone() if isinstance(a, torch.Tensor) else a

        def fn(*args, **kwargs):
            cargs = [clone(a) for a in args]
            ckw = {k: clone(v) for k, v in kwargs.items()}
            y = fused(*args, **kwargs)
            ys = stock(*cargs, **ckw)
            pairs = zip(y, ys) if isinstance(y, tuple) else [(y, ys)]
            for a, b in pairs:
                if a.is_floating_point():
                    r = _rel(a, b)
                    st["max_rel_l2"] = max(st["max_rel_l2"], r) if r == r else float("nan")
            st["calls"] += 1
            return y

        return replace(p, fn=fn, via=p.via + "+shadow")


def _perturbed(x: torch.Tensor, seed: int = 7) -> torch.Tensor:
    """x with every bf16 element moved by one unit in the last place (random direction)."""
    g = torch.Generator(device=x.device)
    g.manual_seed(seed)
    step = torch.randint(0, 2, x.shape, generator=g, device=x.device, dtype=torch.int16) * 2 - 1
    return (x.contiguous().view(torch.int16) + step).view(torch.bfloat16)


def model_ops(values) -> set[str]:
    """Variant ids that decide an op this model uses (or what it holds)."""
    ch = values_chooser(values, stock="plain")
    vids = {ch(op).variant for op in STEP_OPS}
    return {v for v in vids if v} | MEMORY_ONLY | LAUNCH_FLAGS


def replay_times_ms(g, replays: int, warmup: int = 3, per: int = 1) -> list[float]:
    """Replay a captured ``torch.cuda.CUDAGraph`` ``replays`` times (after ``warmup``), each timed with CUDA
    events; milliseconds per replay divided by ``per`` (the calls the graph holds), sorted."""
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / per)
    out.sort()
    return out


def summary(sorted_times: Sequence[float]) -> dict:
    """Median, p10 and p90 of sorted times."""
    n = len(sorted_times)
    return {"median": statistics.median(sorted_times), "p10": sorted_times[n // 10],
            "p90": sorted_times[(9 * n) // 10], "n": n}


def measure(model: DecodeStepModel, replays: int, cuda: bool) -> dict:
    """Launch sites of an eager step; on CUDA also graph nodes and replay times. Errors are recorded in the
    row (``error``), not raised, so one failing measurement leaves the others standing."""
    row: dict = {}
    try:
        model.reset_state()
        c = counter.LaunchCounter()
        model.part_hook = c.part_scope
        try:
            with c:
                model.step()
        finally:
            model.part_hook = None
        row.update(launch_sites=c.total, aten_launches=sum(c.aten.values()), triton_launches=sum(c.triton.values()),
                   launch_parts={str(k): v for k, v in sorted(c.by_part.items(), key=lambda kv: -kv[1])})
        if cuda:
            model.reset_state()
            g, _, nodes = counter.capture(model.step)
            row["graph"] = nodes
            st = summary(replay_times_ms(g, replays))
            row.update(ms=st["median"], p10=st["p10"], p90=st["p90"], replays=st["n"])
            del g
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported in the result
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return row


def parts_profile(model: DecodeStepModel, steps: int = 3) -> list[dict]:
    """Device time per model part (kernels launched inside each ``part:*`` range), ms per step, eager steps:
    what the step's time is made of (without the launch gaps a graph replay still pays)."""
    from torch.profiler import ProfilerActivity, profile

    model.reset_state()
    model.step()
    torch.cuda.synchronize()
    model.profile_parts = True
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                model.step()
            torch.cuda.synchronize()
    finally:
        model.profile_parts = False
    rows = []
    for e in prof.key_averages():
        if e.key.startswith("part:"):
            dev = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
            rows.append({"part": e.key[5:], "ms": dev / 1e3 / steps, "calls": e.count // steps})
    rows.sort(key=lambda r: -r["ms"])
    return rows


def run_plan(plan: dict, device: Optional[str] = None, log=print, choosers: Optional[dict] = None,
             out_path: Optional[str] = None) -> dict:
    """Run a plan. ``choosers``: profile name -> chooser for the measured models (default: the plan's values
    through :func:`values_chooser`; ``r9kctl bench --dispatch plugin`` passes the plugin's DispatchTable)."""
    cuda = torch.cuda.is_available() if device is None else device == "cuda"
    device = "cuda" if cuda else "cpu"
    cfg = get_config(plan.get("config", "flash-next-tp4"))
    P, against = plan["profile"], plan.get("against") or []
    against = [against] if isinstance(against, str) else list(against)  # a string: a plan of schema 1
    profs = dict(plan["profiles"])
    # The headline over the ops whose stock is vLLM's real path: a baseline that differs from the profile only there
    # (REAL_VLLM_OPS at their stock values, every stand-in op as the profile has it). Derived from the first baseline
    # with vLLM's stock unless the plan says "real_ops": false.
    vq = next((q for q in against if profs[q].get("stock", "vllm") == "vllm" and q != P), None)
    if plan.get("real_ops", True) and vq is not None and real_ops_label(vq) not in against:
        rq = real_ops_label(vq)
        profs[rq] = {"profile": profs[vq].get("profile", vq), "stock": "vllm", "hash": None, "derived_from": vq,
                     "values": real_ops_values(profs[P]["values"], profs[vq]["values"]), "non_stock": []}
        against.append(rq)
    names = [P] + against
    replays = int(plan.get("replays", 50))
    t0 = time.time()
    w = Weights.build(cfg, device=device, seed=int(plan.get("seed", 0)))
    log(f"weights built in {time.time() - t0:.1f} s on {device}")
    result = {"schema": "r9k-decode-step-result/1", "config": cfg.name, "device": device,
              "gpu": torch.cuda.get_device_name() if cuda else None, "torch": torch.__version__,
              "context": plan["context"], "profiles": {}, "rows": [], "checks": [], "ablation": [], "memory": {},
              "stock_source": {op: {"kind": STOCK_SOURCE[op][0], "text": STOCK_SOURCE[op][1]} for op in STEP_OPS},
              "real_vllm_ops": list(REAL_VLLM_OPS)}
    try:
        import triton
        result["triton"] = triton.__version__
    except ImportError:
        pass
    choosers = {n: (choosers or {}).get(n) or values_chooser(profs[n]["values"], stock=profs[n].get("stock", "vllm"))
                for n in names}
    for name in names:
        pr, stock = profs[name], profs[name].get("stock", "vllm")
        out = result["profiles"][name] = {"hash": pr.get("hash"), "profile": pr.get("profile", name), "stock": stock,
                                          "ops": describe({op: choosers[name](op) for op in STEP_OPS}, stock)}
        if pr.get("derived_from"):
            out["derived_from"] = pr["derived_from"]
            out["note"] = (f"{P} with only {', '.join(REAL_VLLM_OPS)} back to vLLM's stock "
                           f"(the ops whose stock is vLLM's real path)")
    try:
        from ...kernels._triton import vllm_peer

        result["vllm_peer"] = dict(zip(("ok", "where"), vllm_peer.available()))
    except Exception as exc:  # noqa: BLE001
        result["vllm_peer"] = {"ok": False, "where": repr(exc)}

    def save():
        if out_path:
            fileio.atomic_write(out_path, json.dumps(result, indent=1), "result file")

    def check(R: int, what: str, rel_l2: float, ok: bool, tol: Optional[float] = None, note: Optional[str] = None):
        c = {"requests": R, "what": what, "rel_l2": rel_l2, "tol": tol, "ok": ok}
        result["checks"].append(c if note is None else dict(c, note=note))

    for R in plan["requests"]:
        inp = StepInputs.build(cfg, R, plan["context"], device=device, seed=int(plan.get("seed", 0)) + 1)
        outs, models = {}, {}
        for name in names:
            vals = profs[name]["values"]
            m = models[name] = DecodeStepModel(w, inp, choosers[name], flags=vals)
            outs[name] = m.step()
            if R == plan["requests"][0]:
                result["memory"][name] = memory_report(m, profs[name], cfg)
            if not any(p.fused for p in m.picks.values()):
                continue
            # gated: each fused op against its stock implementation on the same inputs, at every call
            shadow = ShadowChooser(choosers[name])
            DecodeStepModel(w, inp, shadow, flags=vals).step()
            for op, st in sorted(shadow.stats.items()):
                if not st["calls"]:
                    continue  # chosen but not used (hc_mix when the fp8 decode path takes precedence)
                tol = OP_TOL.get(op, IMPL_TOL)
                check(R, f"{name}: {op} fused vs stock, in situ ({st['calls']} calls, max)", st["max_rel_l2"],
                      st["max_rel_l2"] <= tol, tol)
            # reported: the whole step against every op at its stock implementation, and how far a one-ulp
            # change of the step's input moves the output (the network's own amplification of rounding)
            y_ref = DecodeStepModel(w, inp, stock_impl_chooser(vals), flags=vals).step()
            m.reset_state()
            y_pert = m.step(_perturbed(inp.x0))
            m.reset_state()
            check(R, f"{name}: whole step vs stock implementations", _rel(outs[name], y_ref),
                  bool(torch.isfinite(outs[name]).all()), note="reported; compare with the one-ulp input sensitivity below")
            check(R, f"{name}: whole step, input moved by 1 bf16 ulp", _rel(y_pert, outs[name]), True,
                  note="the random-weight network's amplification of a rounding-size change")
            del y_ref, y_pert
        for Q in against:
            same_formats = models[P].hc_fp8 == models[Q].hc_fp8
            check(R, f"{P} vs {Q}, whole step", _rel(outs[P], outs[Q]),
                  bool(torch.isfinite(outs[P]).all() and torch.isfinite(outs[Q]).all()),
                  note="reported (the in-situ op checks are the gate)" + (
                      "" if same_formats else "; weight formats differ (fp8 HC copies)"))
        for name in names:
            row = {"requests": R, "M": R * cfg.spec_tokens, "profile": name}
            row.update(measure(models[name], replays, cuda))
            if cuda and R == max(plan["requests"]) and plan.get("parts", True):
                try:
                    row["parts"] = parts_profile(models[name])
                except Exception as exc:  # noqa: BLE001
                    row["parts_error"] = repr(exc)[:300]
            result["rows"].append(row)
            log(json.dumps({k: v for k, v in row.items() if k != "parts"}))
            save()
        del models, outs
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        if plan.get("ablate") and R == plan.get("ablate_requests", plan["requests"][0]):
            result["ablation"] = ablation(w, inp, profs[P], replays, cuda, log)
            save()
    for Q in against:
        for R in plan["requests"]:
            a = next(r for r in result["rows"] if r["requests"] == R and r["profile"] == P)
            b = next(r for r in result["rows"] if r["requests"] == R and r["profile"] == Q)
            if "ms" in a and "ms" in b:
                result.setdefault("ratios", []).append({
                    "requests": R, "against": Q, "speedup": b["ms"] / a["ms"],
                    "nodes_ratio": (a["graph"]["nodes"] / b["graph"]["nodes"]) if a.get("graph", {}).get("nodes")
                    and b.get("graph", {}).get("nodes") else None})
    errors = [r for r in result["rows"] + result["ablation"] if r.get("error")]
    result["ok"] = all(c["ok"] for c in result["checks"]) and not errors
    result["seconds"] = time.time() - t0
    save()
    return result


def ablation(w, inp, prof: dict, replays: int, cuda: bool, log) -> list[dict]:
    """Each non-stock variant of the profile back to stock, one at a time: its worth in ms and nodes."""
    vals = prof["values"]
    base = DecodeStepModel(w, inp, values_chooser(vals), flags=vals)
    b = measure(base, replays, cuda)
    base_picks = {k: p.impl for k, p in base.picks.items()}
    base_bytes = base.weight_bytes()
    del base
    rows = [{"variant": "(profile)", "knob": "", **b}]
    used = model_ops(vals)
    for v in prof.get("non_stock", []):
        if v["id"] not in used:
            continue
        alt = {**vals, v["id"]: v["stock"]}
        m = DecodeStepModel(w, inp, values_chooser(alt), flags=alt)
        picks = {k: p.impl for k, p in m.picks.items()}
        row = {"variant": v["id"], "knob": f"{v['knob']}={v['value']}->{v['stock']}", **variant_stock(v["id"])}
        if picks == base_picks and v["id"] not in MEMORY_ONLY | LAUNCH_FLAGS:
            row["note"] = "same implementations as the profile (another variant takes precedence)"
        elif v["id"] in MEMORY_ONLY:
            row["note"] = "memory only"
        else:
            r = measure(m, replays, cuda)
            row.update(r)
            if "ms" in r and "ms" in b:
                row["worth_ms"] = r["ms"] - b["ms"]
            if r.get("graph", {}).get("nodes") and b.get("graph", {}).get("nodes"):
                row["worth_nodes"] = r["graph"]["nodes"] - b["graph"]["nodes"]
            row["worth_launch_sites"] = r["launch_sites"] - b["launch_sites"]
        row["weight_bytes_delta"] = m.weight_bytes() - base_bytes  # what turning it back to stock changes
        rows.append(row)
        log(json.dumps(row))
        del m
        gc.collect()
    return rows


def real_ops_label(baseline: str) -> str:
    return f"{baseline}-real" if "@" in baseline else f"{baseline}@vllm-real"


def variant_stock(vid: str) -> dict:
    """Which stock a variant's ablation row was measured against: its op's :data:`STOCK_SOURCE` entry."""
    for op in STEP_OPS:
        if ops.get(op).variant == vid:
            kind, text = STOCK_SOURCE[op]
            if op == "hc_mix_fp8":  # back to stock the model runs the bf16 mix: its stock is hc_mix's, or fused
                kind, text = "stand-in", text + "; the bf16 mix runs as the profile chooses it"
            return {"op": op, "stock_kind": kind, "stock_source": text}
    return {"op": None, "stock_kind": "-", "stock_source": "not an op (a launch flag or what the model holds)"}


def memory_report(m: DecodeStepModel, prof: dict, cfg) -> dict:
    """Weight bytes per rank and, per variant, the bytes the model adds beside the registry's declared
    whole-model cost, compared per HC module (this model has ``cfg.hc_modules`` of them)."""
    out = {"weight_bytes": m.weight_bytes(), "variants": []}
    declared = prof.get("memory", {})
    modules = cfg.hc_modules
    for vid, added in sorted(m.variant_bytes.items()):
        d = declared.get(vid, {})
        row = {"variant": vid, "model_bytes": added, "model_modules": modules,
               "model_per_module": added / modules, "declared_bytes": d.get("bytes"),
               "declared_modules": d.get("modules"), "basis": d.get("basis")}
        if d.get("bytes") is not None and d.get("modules"):
            row["declared_per_module"] = d["bytes"] / d["modules"]
            row["agree"] = abs(row["declared_per_module"] - row["model_per_module"]) < 0.5
        out["variants"].append(row)
    for vid, d in declared.items():
        if vid not in m.variant_bytes and d.get("bytes"):
            out["variants"].append({"variant": vid, "model_bytes": None, "declared_bytes": d["bytes"],
                                    "note": "not modelled by the decode step (memory outside its weights)"})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="run a decode-step plan (JSON) and write the result")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--out")
    ap.add_argument("--device", choices=("cuda", "cpu"))
    a = ap.parse_args(argv)
    plan = json.load(open(a.plan))
    if a.device != "cpu" and not torch.cuda.is_available() and not str(plan.get("config", "")).startswith("tiny"):
        print("no CUDA GPU here: the decode-step benchmark needs one (the tiny configuration runs on the CPU)")
        return 0
    res = run_plan(plan, device=a.device, log=lambda s: print(s, file=sys.stderr, flush=True), out_path=a.out)

    print(render(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
