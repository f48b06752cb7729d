"""Benchmark glue shared by the part-2 kernel benchmarks (qsa_glue, qk_rope, shared_expert, gdn_decode).

Timing, launch counting and copy bandwidth come from :mod:`r9k.kernels._bench` (CUDA-graph replay rotating over
several argument sets). Added here: the graph node count of one call (``cudaGraphGetNodes`` on a captured graph,
when cuda-python is importable; None otherwise) and the row format of the part-2 table.
"""
from __future__ import annotations

COLS = ["op", "M", "stock us", "fused us", "speedup", "launches s/f", "nodes s/f", "floor us"]


def graph_nodes(fn, args) -> int | None:
    """Nodes in a CUDA graph holding one call of ``fn(*args)``; None if the driver API is not reachable."""
    import torch

    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return None
    try:
        fn(*args)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g):
            fn(*args)
        h = cudart.cudaGraph_t(init_value=g.raw_cuda_graph())
        err, _nodes, n = cudart.cudaGraphGetNodes(h, 0)
        if int(err) != 0:
            return None
        del g
        return int(n)
    except Exception:  # noqa: BLE001 - torch / cuda-python API differences: report unknown, never guess
        return None


def row(name: str, m: int, stock_fn, fused_fn, stock_sets, fused_sets, bytes_moved: int, bw: float) -> dict:
    from r9k.kernels._bench import graph_time_us, launches_per_call

    ts = graph_time_us(stock_fn, stock_sets)
    tf = graph_time_us(fused_fn, fused_sets)
    ls = launches_per_call(stock_fn, stock_sets[0])
    lf = launches_per_call(fused_fn, fused_sets[0])
    ns = graph_nodes(stock_fn, stock_sets[0])
    nf = graph_nodes(fused_fn, fused_sets[0])
    return {
        "op": name, "M": m, "stock us": ts["us"], "fused us": tf["us"], "speedup": ts["us"] / tf["us"],
        "launches s/f": f"{ls:g}/{lf:g}", "nodes s/f": f"{ns if ns is not None else '-'}/{nf if nf is not None else '-'}",
        "floor us": bytes_moved / bw * 1e6, "fused p10-p90": f"{tf['p10']:.2f}-{tf['p90']:.2f}",
    }


def main_bw():
    from r9k.kernels._bench import copy_bandwidth

    return copy_bandwidth()
