"""The CUDA-graph timing harness of every kernel benchmark (notes/kernels-linear-routing.md says why): a graph of
calls rotating over argument sets (their weights stream from HBM, as in a decode step, not from the L2), launches
counted by torch.profiler, the copy bandwidth as the denominator of every bandwidth fraction. torch is imported
lazily.
"""
from __future__ import annotations

import functools
import json
import os
import statistics
from typing import Callable, Sequence
from unittest import mock

from ..r9kctl.decode_step.run import replay_times_ms, summary

L2_BYTES = 60 << 20  # H200: 60 MB L2 (the rotation must exceed it several times)


def copies_for(bytes_per_copy: int, min_total: int = 4 * L2_BYTES, lo: int = 8, hi: int = 64) -> int:
    """Argument sets to rotate over so the weights they hold total at least ``min_total`` bytes."""
    n = -(-min_total // max(1, bytes_per_copy))
    return max(lo, min(hi, n))


def copy_bandwidth(nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written (median)."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    src.random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    return 2 * nbytes / statistics.median(times)


def graph_time_us(fn: Callable, arg_sets: Sequence[tuple], replays: int = 50, warmup: int = 3) -> dict:
    """Median microseconds per call of ``fn`` in CUDA-graph replay, rotating over ``arg_sets`` (one graph holds a
    call on each): ``{"us": median, "p10": ..., "p90": ..., "calls_per_graph": len(arg_sets)}``."""
    import torch

    # warm up on a side stream (required before capture), every argument set
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            for args in arg_sets:
                fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for args in arg_sets:
            fn(*args)
    per_call = [t * 1e3 for t in replay_times_ms(g, replays, warmup, per=len(arg_sets))]
    del g
    st = summary(per_call)
    return {"us": st["median"], "p10": st["p10"], "p90": st["p90"], "calls_per_graph": len(arg_sets)}


def launches_per_call(fn: Callable, args: tuple, calls: int = 4) -> float:
    """GPU activities (kernels, memsets, device copies) one call of ``fn`` launches, by torch.profiler; -1.0 if
    the profiler cannot see the device (reported as unknown, not guessed)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(*args)
            torch.cuda.synchronize()
        n = sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    except Exception:  # noqa: BLE001 - profiler unavailable in this environment
        return -1.0
    return n / calls


def fmt_table(rows: Sequence[dict], cols: Sequence[str]) -> str:
    """A markdown table of ``rows`` (dicts) over ``cols``; floats with 2 decimals."""

    def cell(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def node_overhead_us(n: int = 64) -> float:
    """Graph-replay cost of one tiny kernel node (a 1-element fill): the floor of any single-launch op."""
    import torch

    bufs = [(torch.empty(1, device="cuda"),) for _ in range(n)]
    return graph_time_us(lambda p: p.fill_(1.0), bufs)["us"]


def sweep(name: str, configs, time_fn, check_fn, ms=(1, 16)):
    """Time ``time_fn(cfg, m)`` for every config at the widths ``ms``; configs whose ``check_fn(cfg)``
    fails (wrong result, or a compile error) are reported and skipped. Returns (best cfg, rows)."""
    rows, best = [], None
    for c in configs:
        try:
            ok = bool(check_fn(c))
            ts = [time_fn(c, m) for m in ms] if ok else []
        except Exception as exc:  # noqa: BLE001 - a config that does not compile is skipped, reported
            ok, ts = False, []
            print(f"sweep {name} {c}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        tot = sum(ts) if ts else float("inf")
        rows.append({"kernel": name, "cfg": c if isinstance(c, int) else list(c), "us": ts, "ok": ok})
        print(f"sweep {name} {c} us(M={ms})={['%.2f' % t for t in ts]} ok={ok}", flush=True)
        if ok and (best is None or tot < best[0]):
            best = (tot, c)
    print(f"best {name}: {best[1] if best else None}", flush=True)
    return (best[1] if best else None), rows


def update_json(path: str, updates: dict) -> None:
    """Merge ``updates`` into the JSON object at ``path`` (created if missing)."""
    data = {}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    for k, v in updates.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k].update(v)
        else:
            data[k] = v
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


def save_tuned(mod, updates: dict) -> None:
    """Merge sweep winners into kernel module ``mod``'s tuned-config file and reload ``mod.TUNED`` from it."""
    update_json(mod.TUNED_FILE, updates)
    mod.TUNED.clear()
    mod.TUNED.update(mod.load_tuned())


#: Columns of the per-op table (stock vs fused, launches and graph nodes of one call, floor).
COLS = ["op", "M", "stock us", "fused us", "speedup", "launches s/f", "nodes s/f", "floor us"]


def graph_nodes(fn, args) -> int | None:
    """Nodes in a CUDA graph holding one call of ``fn(*args)``; None if the driver API is not reachable."""
    import torch

    try:
        from ..kernels._triton.launches import capture

        _g, _out, nodes = capture(lambda: fn(*args))
        del _g
        torch.cuda.synchronize()
        return int(nodes["nodes"])
    except Exception:  # noqa: BLE001 - driver API differences: report unknown, never guess
        return None


def row(name: str, m: int, stock_fn, fused_fn, stock_sets, fused_sets, bytes_moved: int, bw: float,
        nodes: bool = True) -> dict:
    """Time a stock and a fused implementation on their argument sets: one row of :data:`COLS`, with the bandwidth
    fraction and the fused spread. ``bytes_moved``: the fewest bytes one call must move. ``nodes``: also count
    the graph nodes of one call."""
    ts = graph_time_us(stock_fn, stock_sets)
    tf = graph_time_us(fused_fn, fused_sets)
    ls = launches_per_call(stock_fn, stock_sets[0])
    lf = launches_per_call(fused_fn, fused_sets[0])
    floor_us = bytes_moved / bw * 1e6
    r = {"op": name, "M": m, "stock us": ts["us"], "fused us": tf["us"], "speedup": ts["us"] / tf["us"],
         "launches s/f": f"{ls:g}/{lf:g}", "floor us": floor_us, "bw frac": floor_us / tf["us"],
         "fused p10-p90": f"{tf['p10']:.2f}-{tf['p90']:.2f}"}
    if nodes:
        ns = graph_nodes(stock_fn, stock_sets[0])
        nf = graph_nodes(fused_fn, fused_sets[0])
        r["nodes s/f"] = f"{ns if ns is not None else '-'}/{nf if nf is not None else '-'}"
    return r


#: Set environment variables for a block (kernels read ``R9K_PDL`` when they launch), then restore them.
env = functools.partial(mock.patch.dict, os.environ)
