"""The one benchmark driver of every kernel op: CUDA-graph replay over rotating inputs (``timing``), each op's
table printed as it finishes, a short summary table last, everything in one JSON file.

    python -m r9k.bench.kernels [OP ...] [--sweep] [--json FILE]

OP: any of :data:`BENCHES` (default: all). ``--sweep`` also runs the tile sweeps of the GEMM ops and writes
their winners to the device's tuned-config file (``tuned``). A bench that fails is reported and the others
still run.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from ..timing import COLS, copy_bandwidth, fmt_table, node_overhead_us

#: Every op's benchmark, ``bench_<op>.py`` here: ``run(bw, sweep)`` returns its rows (and its sweep's rows, a
#: tuple), ``COLS`` its table's columns (default: :data:`r9k.bench.timing.COLS` and the fused spread).
BENCHES = ("fp8_block", "hc_mix", "router", "hc_norm", "gdn_decode", "qsa_glue", "qk_rope", "shared_expert",
           "qsa_prepare")  # qsa_prepare: vLLM's one-launch QSA prepare beside the project's attention glue


def _bench(name: str, bw: float, sweep: bool):
    b = importlib.import_module(f"{__package__}.bench_{name}")
    r = b.run(bw, sweep)
    rows, extra = r if isinstance(r, tuple) else (r, None)
    return rows, {"sweep": extra} if extra is not None else {}, getattr(b, "COLS", COLS + ["fused p10-p90"])


#: The summary printed last: (op prefix, columns).
SUMMARY = ["op", "M", "stock us", "fused us", "fused pdl us", "vllm us", "cuBLAS bf16 us", "floor us"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ops", nargs="*", metavar="OP")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    unknown = [o for o in a.ops if o not in BENCHES]
    if unknown:
        print(f"error: unknown op {unknown[0]!r} (one of {', '.join(BENCHES)})", file=sys.stderr)
        return 2
    import torch
    import triton

    if not torch.cuda.is_available():
        print("no CUDA GPU here: the kernel benchmarks need one")
        return 0
    bw, node = copy_bandwidth(), node_overhead_us()
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "copy_bandwidth": bw, "node_us": node, "ops": {}}
    print(f"{out['gpu']}: copy bandwidth {bw / 1e12:.2f} TB/s, one graph node {node:.2f} us", flush=True)
    summary, failed = [], []
    for name in a.ops or list(BENCHES):
        t0 = time.time()
        try:
            rows, extra, cols = _bench(name, bw, a.sweep)
        except Exception as exc:  # noqa: BLE001 - one failing bench leaves the others standing
            traceback.print_exc()
            failed.append(name)
            out["ops"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            continue
        out["ops"][name] = {"rows": rows, **extra, "seconds": time.time() - t0}
        print(f"\n== {name} ({time.time() - t0:.0f} s)\n" + fmt_table(rows, cols), flush=True)
        summary += [r for r in rows if "M" in r]
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1, default=str)
    print("\nKERNELS (median us per call, CUDA-graph replay over rotating inputs)")
    print(fmt_table(summary, SUMMARY))
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
