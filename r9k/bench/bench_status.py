"""What the truthful status costs (not a test): ``python -m r9k.bench.bench_status [--calls N]``.

1. A counted call against the same call uncounted: two torch custom ops doing a tiny ``F.linear`` (the most
   sensitive comparison), one with ``report.hit`` inside; interleaved rounds, median per call.
2. The status flusher's look, once a second: ``report.snapshot()`` of 5 ops x 48 layers and its comparison.
3. The flusher's counters-file write, and for comparison a status-section write.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from ..plugin import report


def _ops():
    import torch

    def counted(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        report.hit("bench_op", "fused")
        return torch.nn.functional.linear(x, w)

    def plain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, w)

    ops = {}
    for name, fn in (("counted", counted), ("plain", plain)):
        op = torch.library.custom_op(f"r9k_bench::{name}", fn, mutates_args=(),
                                     schema="(Tensor x, Tensor w) -> Tensor")
        op.register_fake(lambda x, w: x.new_empty((x.shape[0], w.shape[0])))
        ops[name] = op
    return ops


def bench_calls(calls: int, rounds: int) -> dict:
    import torch

    ops = _ops()
    x = torch.randn(4, 128, dtype=torch.bfloat16)
    w = torch.randn(8, 128, dtype=torch.bfloat16)
    per = {"counted": [], "plain": []}
    for name in per:  # warm up
        for _ in range(200):
            ops[name](x, w)
    for _ in range(rounds):
        for name in ("counted", "plain") if _ % 2 == 0 else ("plain", "counted"):
            op = ops[name]
            t = time.perf_counter_ns()
            for _i in range(calls):
                op(x, w)
            per[name].append((time.perf_counter_ns() - t) / calls)
    return {k: statistics.median(v) for k, v in per.items()} | {f"min_{k}": min(v) for k, v in per.items()} | {
        "spread_plain": (min(per["plain"]), max(per["plain"]))}


def _fill_counters(paths) -> None:
    """A realistic counter table: 5 ops, 48 layers each, one hit on each of ``paths``."""
    report.reset()
    for op in ("router_gemm", "moe_route", "shared_expert", "gdn_decode", "qk_norm_rope"):
        for i in range(48):
            report.layer(op, f"model.layers.{i}.{op}", True)
        for path in paths:
            report.hit(op, path)


def bench_look(looks: int) -> float:
    _fill_counters(("fused", "fallback:rows>16", "stock", "fallback:prefill"))
    last = report.snapshot()
    t = time.perf_counter_ns()
    for _ in range(looks):
        snap = report.snapshot()
        _ = snap == last
    out = (time.perf_counter_ns() - t) / looks
    report.reset()
    return out


def bench_write(writes: int) -> float:
    sec = {"profile": "p", "hash": "h" * 12, "tp": 1, "model": "m", "process": {"name": "VllmWorker-0", "pid": 1,
                                                                             "role": "worker", "rank": 0},
           "counters": {f"op{i}": {"installed": [f"model.layers.{j}" for j in range(48)], "kept": {},
                                   "calls": {"fused": 123456}} for i in range(5)},
           "values": {f"R9K_K{i}": "1" for i in range(147)}}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "status.json")
        t = time.perf_counter_ns()
        for _ in range(writes):
            report.write_section(path, sec)
        return (time.perf_counter_ns() - t) / writes


def bench_counters_write(writes: int) -> float:
    _fill_counters(("fused",))
    snap = report.snapshot()
    report.reset()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "status.json")
        t = time.perf_counter_ns()
        for _ in range(writes):
            report.write_counters(path, "VllmWorker-0", snap)
        return (time.perf_counter_ns() - t) / writes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=21)
    a = ap.parse_args()
    c = bench_calls(a.calls, a.rounds)
    print(f"custom-op call, median of rounds: counted {c['counted']:.0f} ns, uncounted {c['plain']:.0f} ns; "
          f"best round: counted {c['min_counted']:.0f} ns, uncounted {c['min_plain']:.0f} ns, difference "
          f"{c['min_counted'] - c['min_plain']:+.0f} ns (uncounted rounds spread {c['spread_plain'][0]:.0f}-"
          f"{c['spread_plain'][1]:.0f} ns)")

    n = 10**6
    t = time.perf_counter_ns()
    for _ in range(n):
        report.hit("bench_op", "fused")
    print(f"report.hit alone: {(time.perf_counter_ns() - t) / n:.0f} ns per call ({n} calls)")
    print(f"flusher look (snapshot of 5 ops x 48 layers + compare): {bench_look(2000) / 1000:.1f} us, once a second")
    print(f"counters-file write (the flusher's write, 5 ops x 48 layers): {bench_counters_write(500) / 1e3:.0f} us, "
          "at most once a second, only when the counters changed")
    print(f"for comparison, a status-section write (locked read-modify-write, done at start and on plan changes): "
          f"{bench_write(200) / 1e6:.2f} ms")


if __name__ == "__main__":
    main()
